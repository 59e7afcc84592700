#!/usr/bin/env bash
# GPU acceptance run of the record-class recipes (issue 4): `tricklab speedrun` over many seeds,
# then one markdown table of the results. Its time column is record seconds, airbench's own
# definition (total_time_seconds: whitening fit on 5,000 training images + training epochs + final
# TTA evaluation, each device-synchronised), beside the figure airbench quotes for the same script;
# train seconds (the epochs alone) follow. Both give mean / median (min-max) over the counted runs.
#
# Run it from the repository root on a machine with a CUDA GPU; nothing is installed:
#     benchmarks/gpu_acceptance.sh                      # speedrun94, speedrun96, resnet18-fast
#     benchmarks/gpu_acceptance.sh speedrun94           # only the recipes named
# It needs python3 with torch, torchvision, scipy, rich and pyyaml (optuna is not needed) and
# CIFAR-10 as train.tar.gz / test.tar.gz in .carry/ (the JPEG q75 copy from
# ../shared/data/cifar10-jpeg; no internet is needed).
#
# Results go under $OUT (default runs/gpu-acceptance):
#     $OUT/<recipe>/            one folder per run (warmup/, seed-0/, ...) and summary.json
#     $OUT/<recipe>.log         the run's console output (stdout and stderr)
#     $OUT/gpu_acceptance.md    the table of every $OUT/*/summary.json (benchmarks/speedrun_table.py)
#
# Runs per recipe: speedrun94 25, speedrun96 5, resnet18-fast 3; override each with an environment
# variable named RUNS_ plus the recipe in capitals with - as _, e.g. RUNS_SPEEDRUN94=25,
# RUNS_SPEEDRUN96=5, RUNS_RESNET18_FAST=3.
#
# One command on a lent device machine may run 10 minutes at most, and all three recipes take
# longer (speedrun94 x 26 runs is a few minutes, speedrun96 about 40 s a run, resnet18-fast about
# a minute a run), so split them over calls, e.g.
#     benchmarks/gpu_acceptance.sh speedrun94
#     benchmarks/gpu_acceptance.sh speedrun96
#     benchmarks/gpu_acceptance.sh resnet18-fast
# (not one recipe over two calls: each call runs seeds 0..N-1). Each call writes the table of what
# it ran; for one table over several calls, fetch their summary.json files and run
#     python3 benchmarks/speedrun_table.py a/speedrun94/summary.json b/speedrun96/summary.json ...
#
# Other settings (environment):
#     DATA_DIR=.carry         folder with train.tar.gz and test.tar.gz
#     WARMUP_EPOCHS=1         length of the uncounted warm-up run (one epoch autotunes every shape;
#                             empty: the recipe's full length)
#     PYTHON=python3          the interpreter
#     EXTRA_OVERRIDES=""      more key=value recipe overrides for every recipe (space-separated),
#                             e.g. "tricks.compile=max-autotune"
set -euo pipefail

cd "$(dirname "$0")/.."
OUT="${OUT:-runs/gpu-acceptance}"
DATA_DIR="${DATA_DIR:-.carry}"
PYTHON="${PYTHON:-python3}"
WARMUP_EPOCHS="${WARMUP_EPOCHS-1}"
read -r -a extra <<<"${EXTRA_OVERRIDES:-}"

if [[ $# -gt 0 ]]; then
    recipes=("$@")
else
    recipes=(speedrun94 speedrun96 resnet18-fast)
fi

default_runs() {
    case "$1" in
        speedrun94) echo 25 ;;
        speedrun96) echo 5 ;;
        resnet18-fast) echo 3 ;;
        *) echo 5 ;;
    esac
}

for archive in train.tar.gz test.tar.gz; do
    if [[ ! -f "$DATA_DIR/$archive" ]]; then
        echo "error: $DATA_DIR/$archive is missing (copy ../shared/data/cifar10-jpeg/*.tar.gz there, or set DATA_DIR)" >&2
        exit 2
    fi
done
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

{
    echo "# GPU acceptance, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo
    echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1 || echo unknown)"
    echo "- python: $("$PYTHON" -c 'import platform, torch; print(platform.python_version(), "torch", torch.__version__, "CUDA", torch.version.cuda)')"
    echo "- data: $DATA_DIR (CIFAR-10 (JPEG q75 copy)); warm-up epochs: ${WARMUP_EPOCHS:-as the recipe}"
    echo
} >"$OUT/header.md"

status=0
for recipe in "${recipes[@]}"; do
    var="RUNS_$(echo "$recipe" | tr '[:lower:]-' '[:upper:]_')"
    runs="${!var:-$(default_runs "$recipe")}"
    warmup=()
    if [[ -n "$WARMUP_EPOCHS" ]]; then
        warmup=(--warmup-epochs "$WARMUP_EPOCHS")
    fi
    echo "== $recipe: $runs runs ($var)" >&2
    set +e
    "$PYTHON" -m tricklab speedrun --recipe "$recipe" --runs "$runs" ${warmup[@]+"${warmup[@]}"} \
        --json --out "$OUT/$recipe" \
        data.name=imagefolder "data.dir=$DATA_DIR" ${extra[@]+"${extra[@]}"} 2>&1 | tee "$OUT/$recipe.log"
    rc=${PIPESTATUS[0]}
    set -e
    if [[ $rc -ne 0 ]]; then
        echo "== $recipe exited with $rc (see $OUT/$recipe.log)" >&2
        status=1
    fi
done

shopt -s nullglob
summaries=("$OUT"/*/summary.json)
if [[ ${#summaries[@]} -gt 0 ]]; then
    { cat "$OUT/header.md"; "$PYTHON" benchmarks/speedrun_table.py "${summaries[@]}"; } \
        >"$OUT/gpu_acceptance.md"
    cat "$OUT/gpu_acceptance.md"
else
    echo "error: no summary.json was written under $OUT" >&2
    status=1
fi
rm -f "$OUT/header.md"
exit "$status"
