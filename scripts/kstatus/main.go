// kstatus prints the kstatus (sigs.k8s.io/cli-utils/pkg/kstatus/status) of each Kubernetes object given as one
// JSON document per line on stdin: one line per object, `<status>\t<message>`. The tests of deploy/argocd use it
// to check that Flux, kpt and other kstatus readers see ModelPreheat and ServedModel as the operator means.
package main

import (
	"bufio"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	for in.Scan() {
		// UnmarshalJSON decodes numbers as int64 where they are integers, as the apiserver's clients do.
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(in.Bytes()); err != nil {
			fmt.Fprintf(os.Stderr, "kstatus: bad object: %v\n", err)
			os.Exit(2)
		}
		res, err := status.Compute(obj)
		if err != nil {
			fmt.Fprintf(os.Stderr, "kstatus: %v\n", err)
			os.Exit(2)
		}
		fmt.Printf("%s\t%s\n", res.Status, res.Message)
	}
	if err := in.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "kstatus: %v\n", err)
		os.Exit(2)
	}
}
