# Shared by the scripts that build Kubernetes components from the Go module proxy. Source it after lib.sh.
K8S_VERSION="${PEERLOAD_K8S_VERSION:-1.33.13}"
STAGING_VERSION="v0.${K8S_VERSION#1.}"

# k8s_wrapper_module NAME NEXT: makes the current directory a module requiring k8s.io/kubernetes v$K8S_VERSION that
# can build its commands. k8s.io/kubernetes refers to its staging modules as v0.0.0 and replaces them with ./staging
# paths, which a dependent module cannot use; each is replaced with its published release. NEXT is what the download's
# progress lines say comes after it. Prints the module's directory in the module cache (its source, e.g. pause.c).
k8s_wrapper_module() {
  local name=$1 next=$2 json modfile staging m
  go mod init "$name" >/dev/null 2>&1
  go mod edit -require="k8s.io/kubernetes@v$K8S_VERSION"
  json=$(with_progress "downloading k8s.io/kubernetes v$K8S_VERSION" "$next" \
    go mod download -json "k8s.io/kubernetes@v$K8S_VERSION")
  modfile=$(sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' <<<"$json")
  staging=$(awk '/^replace|^\t/ && /=> .\/staging/ {print $1}' "$modfile" | grep '^k8s.io/' | sort -u)
  for m in $staging; do go mod edit -replace="$m=$m@$STAGING_VERSION"; done
  sed -n 's/.*"Dir": "\(.*\)".*/\1/p' <<<"$json"
}

# The version the binaries report (`kubectl version`, the apiserver's /version, the kubelet's Node status).
k8s_ldflags() {
  printf '%s' "-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${K8S_VERSION#1.}"
}
