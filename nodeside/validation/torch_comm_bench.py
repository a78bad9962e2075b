"""MPI-free NCCL bandwidth measurement inside the training image (compared with the host).

NGC images bundle their own Open MPI, so nccl-tests over MPI inside them fails
(opal_shmem_base_select failed); ranks come from Slurm instead (srun sets
SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID) and the process group uses the env://
rendezvous on MASTER_ADDR:MASTER_PORT.  busbw uses the nccl-tests formula so the
figures compare with the host run.  Output is read by verdict.py:
    # torch_comm_bench op=all_reduce world=16 nodes=2 max_bytes=8589934592
    all_reduce      1048576 B  time      0.12 ms  algbw     8.7 GB/s  busbw    16.3 GB/s
    # torch_comm_bench done
"""

import argparse
import os
import time


def busbw(op, algbw, world):
    """nccl-tests doc/PERFORMANCE.md: all-reduce 2(n-1)/n, all-to-all (n-1)/n."""
    if op == "all_reduce":
        return algbw * 2 * (world - 1) / world
    return algbw * (world - 1) / world


def sizes(min_bytes, max_bytes):
    n = min_bytes
    while n <= max_bytes:
        yield n
        n *= 2


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--op", choices=("all_reduce", "all_to_all"), required=True)
    p.add_argument("--min-bytes", type=int, default=1 << 20)
    # the gate passes its figure (config.json gate.torch_max_bytes): one home for it
    p.add_argument("--max-bytes", type=int, required=True)
    p.add_argument("--iters", type=int, default=20)
    a = p.parse_args()
    import torch
    import torch.distributed as dist

    rank = int(os.environ["SLURM_PROCID"])
    world = int(os.environ["SLURM_NTASKS"])
    local = int(os.environ["SLURM_LOCALID"])
    nodes = int(os.environ.get("SLURM_JOB_NUM_NODES", os.environ.get("SLURM_NNODES", "1")))
    torch.cuda.set_device(local)
    dist.init_process_group(
        "nccl", init_method="env://", rank=rank, world_size=world, device_id=torch.device("cuda", local)
    )
    if rank == 0:
        print(f"# torch_comm_bench op={a.op} world={world} nodes={nodes} max_bytes={a.max_bytes}", flush=True)
    for nbytes in sizes(a.min_bytes, a.max_bytes):
        x = torch.ones(nbytes // 4, dtype=torch.float32, device="cuda")
        y = torch.empty_like(x)

        def run(x, y):
            if a.op == "all_reduce":
                dist.all_reduce(x)
            else:
                dist.all_to_all_single(y, x)

        for _ in range(5):
            run(x, y)
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(a.iters):
            run(x, y)
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t0) / a.iters
        algbw = nbytes / dt / 1e9
        if rank == 0:
            print(
                f"{a.op:10s} {nbytes:>12d} B  time {dt * 1e3:9.2f} ms  "
                f"algbw {algbw:7.1f} GB/s  busbw {busbw(a.op, algbw, world):7.1f} GB/s",
                flush=True,
            )
        del x, y
    dist.barrier()
    if rank == 0:
        print("# torch_comm_bench done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
