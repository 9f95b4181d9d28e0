"""Runs the real huggingface_hub against HF_ENDPOINT: one call named by argv[1] with JSON arguments argv[2].
Prints one JSON line: the result, or {"error": <exception class>, "message": ...}."""
import json
import os
import sys

import huggingface_hub
from huggingface_hub import HfApi, snapshot_download


def main() -> None:
    call, args = sys.argv[1], json.loads(sys.argv[2])
    try:
        if call == "snapshot_download":
            path = snapshot_download(
                args["repo"],
                revision=args.get("revision"),
                local_dir=args["local_dir"],
                token=args.get("token", False),
            )
            out = {"path": path}
        elif call == "model_info":
            info = HfApi().model_info(
                args["repo"],
                revision=args.get("revision"),
                files_metadata=args.get("files_metadata", False),
                token=args.get("token", False),
            )
            out = {
                "id": info.id,
                "sha": info.sha,
                "siblings": [
                    {
                        "rfilename": s.rfilename,
                        "size": s.size,
                        "blob_id": s.blob_id,
                        "lfs_sha256": s.lfs.sha256 if s.lfs else None,
                    }
                    for s in info.siblings or []
                ],
            }
        elif call == "list_repo_tree":
            out = {
                "entries": [
                    {"path": e.path, "type": type(e).__name__, "lfs_sha256": getattr(getattr(e, "lfs", None), "sha256", None)}
                    for e in HfApi().list_repo_tree(
                        args["repo"], revision=args.get("revision"), recursive=True, token=args.get("token", False)
                    )
                ]
            }
        else:
            raise ValueError(f"unknown call {call}")
        out["version"] = huggingface_hub.__version__
        print(json.dumps(out))
    except Exception as e:  # the test asserts on the class the client raised
        print(json.dumps({"error": type(e).__name__, "message": str(e)[:2000]}))


if __name__ == "__main__":
    main()
