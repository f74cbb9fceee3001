#!/usr/bin/env bash
# The layers (docs/architecture.md): a folder's sources include only the folders below it. Run by
# every build (CMake's check_layers target), so a wrong include fails the build, naming the file,
# the line and the folder it may not reach. runtime/ is four floors of its own (base, backend,
# comm, train). apps/, tests/ and scripts/ may include any folder.
set -u
cd "$(dirname "$0")/.." || exit 1
RUNTIME="runtime/base runtime/backend runtime/comm runtime/train"
# folder: the folders it may include (itself first)
declare -A MAY=(
    [runtime/base]="runtime/base"
    [runtime/backend]="runtime/backend runtime/base"
    [runtime/comm]="runtime/comm runtime/backend runtime/base"
    [runtime/train]="runtime/train runtime/comm runtime/backend runtime/base"
    [tokenizers]="tokenizers runtime/base"
    [metrics]="metrics runtime/base"
    [checkpoints]="checkpoints $RUNTIME"
    [data]="data tokenizers $RUNTIME"
    [models]="models checkpoints $RUNTIME"
)
# the folders of this table, as an include names them: runtime/X for runtime's floors
include_folder() {
    sed -n -e 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\(runtime\/[a-z_]*\)\/.*/\1/p' \
           -e 't' -e 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([a-z_]*\)\/.*/\1/p' <<< "$1"
}
bad=0
for folder in runtime/base runtime/backend runtime/comm runtime/train tokenizers metrics checkpoints data models; do
    while IFS=: read -r file line text; do
        target=$(include_folder "$text")
        [ -n "$target" ] || continue
        case " ${MAY[$folder]} " in
        *" $target "*) ;;
        *) echo "check_layers: $file:$line includes $target/, which $folder/ may not (it may include: ${MAY[$folder]})" >&2
           bad=$((bad + 1)) ;;
        esac
    done < <(grep -rn --include='*.c' --include='*.h' --include='*.cu' --include='*.cc' '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$folder")
done
# every file of runtime/ sits on one of its floors
stray=$(find runtime -maxdepth 1 -type f)
[ -z "$stray" ] || { echo "check_layers: $stray: runtime/'s files live in base/, backend/, comm/ or train/" >&2; bad=$((bad + 1)); }
[ "$bad" -eq 0 ] || { echo "check_layers: $bad include(s) across the layers (docs/architecture.md)" >&2; exit 1; }
