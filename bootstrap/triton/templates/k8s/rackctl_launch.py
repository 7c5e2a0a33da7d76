"""rackctl launcher (shipped in a ConfigMap): tritonserver under mpirun, one rank per GPU.

World size = TP x PP of the engine. Rank 0 serves HTTP, gRPC and metrics; other ranks load only
``tensorrt_llm`` and take part in the engine's MPI world.
"""

import argparse
import os


def rank_args(args, rank):
    cmd = [
        "tritonserver",
        f"--model-repository={args.model_repo}",
        "--disable-auto-complete-config",
        f"--backend-config=python,shm-region-prefix-name=prefix{rank}_",
    ]
    if rank == 0:
        return [
            *cmd,
            f"--http-port={args.http_port}",
            f"--grpc-port={args.grpc_port}",
            f"--metrics-port={args.metrics_port}",
            "--allow-metrics=true",
        ]
    return [
        *cmd,
        "--model-control-mode=explicit",
        "--load-model=tensorrt_llm",
        "--allow-http=false",
        "--allow-grpc=false",
        "--allow-metrics=false",
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--world_size", type=int, required=True)
    parser.add_argument("--model_repo", required=True)
    parser.add_argument("--http_port", type=int, default=8000)
    parser.add_argument("--grpc_port", type=int, default=8001)
    parser.add_argument("--metrics_port", type=int, default=8002)
    args = parser.parse_args()
    if args.world_size == 1:
        argv = rank_args(args, 0)
    else:
        argv = ["mpirun", "--allow-run-as-root"]
        for rank in range(args.world_size):
            argv += ([":"] if rank else []) + ["-n", "1", *rank_args(args, rank)]
    os.execvp(argv[0], argv)  # noqa: S606 - argv built above, no shell


if __name__ == "__main__":
    main()
