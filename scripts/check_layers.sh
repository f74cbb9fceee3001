#!/usr/bin/env bash
# The layers (docs/architecture.md): a folder's sources include only the folders below it. Run by
# every build (CMake's check_layers target), so a wrong include fails the build, naming the file,
# the line and the folder it may not reach. apps/, tests/ and scripts/ may include any folder.
set -u
cd "$(dirname "$0")/.." || exit 1
# folder: the folders it may include (itself first)
declare -A MAY=(
    [runtime]="runtime"
    [tokenizers]="tokenizers runtime"
    [metrics]="metrics runtime"
    [checkpoints]="checkpoints runtime"
    [data]="data tokenizers runtime"
    [models]="models checkpoints runtime"
)
bad=0
for folder in runtime tokenizers metrics checkpoints data models; do
    while IFS=: read -r file line text; do
        target=$(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([a-z_]*\)\/.*/\1/p' <<< "$text")
        [ -n "$target" ] || continue
        case " ${MAY[$folder]} " in
        *" $target "*) ;;
        *) echo "check_layers: $file:$line includes $target/, which $folder/ may not (it may include: ${MAY[$folder]})" >&2
           bad=$((bad + 1)) ;;
        esac
    done < <(grep -rn --include='*.c' --include='*.h' --include='*.cu' --include='*.cc' '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$folder")
done
[ "$bad" -eq 0 ] || { echo "check_layers: $bad include(s) across the layers (docs/architecture.md)" >&2; exit 1; }
