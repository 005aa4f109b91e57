"""torch_reference.py: the dense and 2:4 baselines through PyTorch (cuBLAS, cuSPARSELt), for scale.

Times torch.mm at the benchmark's GEMM shapes and, where PyTorch has cuSPARSELt, the 2:4
semi-structured SpMM of the V:N:M shapes, with CUDA events, L2 flushed before each run, median of
many runs. Prints CSV. Independent of sparsejit: it checks that the cuBLAS numbers sparsejit's
bench reports (through its own cublasGemmEx call) are what cuBLAS does on this GPU.

    python3 bench/torch_reference.py [--reps N]
"""
import argparse
import statistics

import torch


def median_us(fn, reps, flush):
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")  # > the 60 MB L2
    print("library,op,dtype,m,n,k,median_us,dense_equivalent_tflops")
    # (m, n, k): C is m x n. sparsejit's vnm-spmm rows x N x K maps to A (rows x K) times B (K x N).
    shapes = [(4096, 4096, 4096), (8192, 8192, 8192), (28672, 8192, 8192), (11008, 8192, 4096)]
    for dtype, name in ((torch.float16, "f16"), (torch.bfloat16, "bf16")):
        for m, n, k in shapes:
            a = torch.randn(m, k, dtype=dtype, device="cuda")
            b = torch.randn(k, n, dtype=dtype, device="cuda")
            us = median_us(lambda: torch.mm(a, b), args.reps, flush)
            print(f"torch-cublas,gemm,{name},{m},{n},{k},{us:.1f},{2 * m * n * k / us / 1e6:.1f}")
            try:
                mask = torch.tensor([1, 1, 0, 0], dtype=torch.bool, device="cuda").tile(m, k // 4)
                sa = torch.sparse.to_sparse_semi_structured(a.masked_fill(~mask, 0))
                us = median_us(lambda: torch.mm(sa, b), args.reps, flush)
                print(f"torch-cusparselt,spmm-2:4,{name},{m},{n},{k},{us:.1f},{2 * m * n * k / us / 1e6:.1f}")
            except (RuntimeError, AttributeError) as e:  # no cuSPARSELt in this build
                print(f"# cuSPARSELt 2:4 {name} {m}x{n}x{k}: {e}".splitlines()[0])
            del a, b


if __name__ == "__main__":
    main()
