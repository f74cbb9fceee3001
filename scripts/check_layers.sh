#!/usr/bin/env bash
# The layers (docs/architecture.md): a folder's sources include only the folders below it. Run by
# every build (CMake's check_layers target), so a wrong include fails the build, naming the file,
# the line and the folder it may not reach. runtime/ is four floors of its own (base, backend,
# comm, train); models/ is its shared layers, one folder per family, and param_check (which
# knows every family) at its root. apps/, tests/ and scripts/ may include any folder.
set -u
cd "$(dirname "$0")/.." || exit 1
RUNTIME="runtime/base runtime/backend runtime/comm runtime/train"
FAMILIES="models/gpt2 models/bert models/t5 models/glm"
BELOW_MODELS="models/layers checkpoints $RUNTIME"
# folder: the folders it may include (itself first). A file belongs to the longest folder here
# that holds it: runtime/backend/cpu/x.c to runtime/backend.
declare -A MAY=(
    [runtime/base]="runtime/base"
    [runtime/backend]="runtime/backend runtime/base"
    [runtime/comm]="runtime/comm runtime/backend runtime/base"
    [runtime/train]="runtime/train runtime/comm runtime/backend runtime/base"
    [tokenizers]="tokenizers runtime/base"
    [metrics]="metrics runtime/base"
    [checkpoints]="checkpoints $RUNTIME"
    [data]="data tokenizers $RUNTIME"
    [models/layers]="$BELOW_MODELS"
    [models/gpt2]="models/gpt2 $BELOW_MODELS"
    [models/bert]="models/bert $BELOW_MODELS"
    [models/t5]="models/t5 $BELOW_MODELS"
    [models/glm]="models/glm $BELOW_MODELS"
    [models]="models $FAMILIES $BELOW_MODELS"
)
# OWNER: the folder of this table that the file at path $1 lies in (its longest prefix that is
# a key), or empty. Plain string work: this runs for every include at every build.
owner() {
    local dir=$1
    OWNER=
    while [[ "$dir" == */* ]]; do
        dir=${dir%/*}
        [ -n "${MAY[$dir]+set}" ] && { OWNER=$dir; return; }
    done
}
INCLUDE='^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]*/[^"]*)"'
bad=0
while IFS=: read -r file line text; do
    [[ "$text" =~ $INCLUDE ]] || continue
    owner "$file"
    from=$OWNER
    owner "${BASH_REMATCH[1]}"
    target=$OWNER
    [ -n "$target" ] || continue
    case " ${MAY[$from]} " in
    *" $target "*) ;;
    *) echo "check_layers: $file:$line includes $target/, which $from/ may not (it may include: ${MAY[$from]})" >&2
       bad=$((bad + 1)) ;;
    esac
done < <(grep -rn --include='*.c' --include='*.h' --include='*.cu' --include='*.cc' \
         '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' runtime tokenizers metrics checkpoints data models)
# every file of runtime/ sits on one of its floors, and every file of models/ but param_check in a folder
stray=$(find runtime -maxdepth 1 -type f; find models -maxdepth 1 -type f ! -name 'param_check.*')
[ -z "$stray" ] || { echo "check_layers: $(echo $stray): runtime/'s files live in base/, backend/, comm/ or train/, and models/' in layers/ or a family's folder" >&2; bad=$((bad + 1)); }
[ "$bad" -eq 0 ] || { echo "check_layers: $bad include(s) across the layers (docs/architecture.md)" >&2; exit 1; }
