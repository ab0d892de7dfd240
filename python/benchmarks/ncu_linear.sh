#!/usr/bin/env bash
# Warp-stall and memory metrics of one fused-linear launch per argument, on the
# GPU machine (repo root, build/ carried; ncu from the CUDA toolkit):
#   bash python/benchmarks/ncu_linear.sh "N K ROWS [CONFIG]" ...
# e.g. "24576 4096 32 glyd_lin_f12_m2n4w1k8u1" (CONFIG: a name of
# glyd._gpu.linear_configs(); default the automatic choice). Stall columns are
# cycles per issued instruction (smsp__average_warps_issue_stalled_*).
NCU=${NCU:-/usr/local/cuda/bin/ncu}
export PYTHONPATH=$PWD/python GLYD_LIBRARY=$PWD/build/libglyd.so
M="dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warp_latency_per_inst_issued.ratio,smsp__issue_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,lts__t_bytes.sum,dram__bytes_read.sum,launch__registers_per_thread,launch__occupancy_limit_shared_mem,launch__occupancy_limit_registers,launch__grid_size"
for cfg in "$@"; do
  set -- $cfg
  echo "=== $cfg"
  "$NCU" --clock-control none --kernel-name regex:glyd_lin_f12 --launch-skip 3 --launch-count 1 --metrics $M python3 python/benchmarks/profile_linear.py $1 $2 $3 $4 2>&1 | grep -E "^\s+(dram|gpu__|sm__|smsp|l1tex|lts|launch)" | awk '{print $1, $NF}' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//'
done
