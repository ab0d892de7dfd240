#!/usr/bin/env bash
# Where the warps of one fused-linear launch stall, per SASS instruction (ncu's
# warp-state sampling), on the GPU machine (repo root, build/ carried):
#   bash python/benchmarks/ncu_sass.sh "N K ROWS [CONFIG]" [TOP]
# Prints the TOP (default 30) instructions by samples, each with its three
# largest stall reasons. The report is kept in ${OUT:-/tmp}/sass.ncu-rep.
# Another script and kernel: SCRIPT (default python/benchmarks/profile_linear.py,
# given the first argument), KERNEL (a regex, default glyd_lin_f12), SKIP (launches
# of it skipped first, default 3), GLYD_LIBRARY (default build/libglyd.so: a diagnostic
# build, say); e.g. the grouped experts kernel of a MoE block:
#   SCRIPT=python/benchmarks/profile_moe.py KERNEL=glyd_lin_f12gw SKIP=2 \
#     bash python/benchmarks/ncu_sass.sh "qwen3-30b-a3b 512"
NCU=${NCU:-/usr/local/cuda/bin/ncu}
export PYTHONPATH=$PWD/python GLYD_LIBRARY=${GLYD_LIBRARY:-$PWD/build/libglyd.so}
REP=${OUT:-/tmp}/sass
CFG=$1 TOP=${2:-30}
"$NCU" -f -o "$REP" --clock-control none --kernel-name regex:${KERNEL:-glyd_lin_f12} --launch-skip ${SKIP:-3} --launch-count 1 \
  --section SourceCounters --section WarpStateStats --section SpeedOfLight --section Occupancy --section LaunchStats \
  python3 ${SCRIPT:-python/benchmarks/profile_linear.py} $CFG >/dev/null 2>&1 || { echo "ncu failed"; exit 1; }
"$NCU" -i "$REP.ncu-rep" --page details 2>&1 | grep -E "Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Memory Throughput|DRAM Throughput|Compute \(SM\)|Grid Size|Block Size|Waves Per SM|Issue Slots Busy|No Eligible|Active Warps Per" | head -24
# uncoalesced global sectors and shared-memory bank conflicts (excess wavefronts), as ncu words them
"$NCU" -i "$REP.ncu-rep" --page details 2>&1 | grep -E "excessive (sectors|wavefronts)" | sed 's/^ *//' | head -4
"$NCU" -i "$REP.ncu-rep" --page source --csv --print-source sass > "$REP.csv" 2>&1 || { head -5 "$REP.csv"; exit 1; }
python3 - "$REP.csv" "$TOP" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr_i = next((i for i, r in enumerate(rows) if any("Sampling" in c for c in r)), None)
if hdr_i is None:
    sys.exit("no sampling columns; the report starts:\n" + "\n".join(",".join(r)[:300] for r in rows[:8]))
hdr, data = rows[hdr_i], rows[hdr_i + 1:]
col = next(i for i, c in enumerate(hdr) if c.startswith("Warp Stall Sampling (All"))
src = next(i for i, c in enumerate(hdr) if c == "Source")
stall = [i for i, c in enumerate(hdr) if c.startswith("stall_") or "Stall" in c and i != col and "Sampling" not in c]
num = lambda s: float(s.replace(",", "") or 0) if s.replace(",", "").replace(".", "").isdigit() else 0.0
data = [r for r in data if len(r) == len(hdr)]
tot = sum(num(r[col]) for r in data) or 1
print(f"{len(data)} instructions, {tot:.0f} samples")
for r in sorted(data, key=lambda r: -num(r[col]))[:int(sys.argv[2])]:
    why = sorted(((num(r[i]), hdr[i]) for i in stall), reverse=True)[:3]
    print(f"{100 * num(r[col]) / tot:5.1f}%  {r[src][:70]:70s}  " + "  ".join(f"{n}={v:.0f}" for v, n in why if v))
PY
