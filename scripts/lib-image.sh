# Shared by the image scripts. Source it after lib.sh; do not run it.
# buildah as the issue found works here: root, chroot isolation, vfs storage (no overlay, no daemon).
BUILDAH=(buildah --storage-driver vfs)
export BUILDAH_ISOLATION=chroot
image_exists() { "${BUILDAH[@]}" inspect --type image "$1" >/dev/null 2>&1; }
