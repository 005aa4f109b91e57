"""A 200-step toy training run with GMP from dense to 2:8 (issue 33's criterion): a small
regression problem (y = teacher(x) + noise, a two-layer MLP student), pruned on the device by
sparsejit.nn.GMP, the last steps on VNMLinear's sparse products; beside it the same run with
dense weights masked identically (the GMP masks applied with torch only, dense autograd all
through). Prints the loss of both every 20 steps and whether the sparse run ends within 5% of the
masked dense one. Needs torch and a GPU; not yet run on one.

    python examples/gmp_toy_training.py [--vnm 64:2:8] [--dtype bf16] [--seed 0]
"""
from __future__ import annotations

import argparse
import copy

import torch

import sparsejit.nn

STEPS, TOKENS, D_IN, D_HID, D_OUT = 200, 512, 256, 512, 128


def mlp(dtype: torch.dtype) -> torch.nn.Sequential:
    return torch.nn.Sequential(torch.nn.Linear(D_IN, D_HID), torch.nn.ReLU(), torch.nn.Linear(D_HID, D_OUT)).cuda().to(dtype)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vnm", default="64:2:8")
    ap.add_argument("--dtype", default="bf16", choices=["f16", "bf16"])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    dtype = torch.float16 if args.dtype == "f16" else torch.bfloat16
    torch.manual_seed(args.seed)
    teacher = mlp(torch.float32)
    x = torch.randn(TOKENS, D_IN, device="cuda")
    with torch.no_grad():
        y = teacher(x) + 0.01 * torch.randn(TOKENS, D_OUT, device="cuda")
    sparse_model = mlp(dtype)
    dense_model = copy.deepcopy(sparse_model)
    # dense to 2:8 over steps 20..140, then 60 steps at the final pattern
    gmp = sparsejit.nn.GMP(sparse_model, args.vnm, start_step=20, interval=10, n_steps=12)
    masks = {}  # the dense run's masks: GMP's, copied at each pruning step
    opt_s = torch.optim.SGD(sparse_model.parameters(), lr=0.05, momentum=0.9)
    opt_d = torch.optim.SGD(dense_model.parameters(), lr=0.05, momentum=0.9)
    xs, ys = x.to(dtype), y.to(dtype)
    print(f"{'step':>5} {'sparsity':>8} {'sparse loss':>12} {'masked dense':>13}")
    for step in range(STEPS):
        losses = []
        for model, opt in ((sparse_model, opt_s), (dense_model, opt_d)):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(xs).float(), ys.float())
            loss.backward()
            opt.step()
            losses.append(loss.item())
        if step <= gmp.last_step:
            target = gmp.step(step)
            masks = {name: m.clone() for name, m in gmp.masks.items()}
        with torch.no_grad():
            for name, m in masks.items():
                dense_model.get_submodule(name).weight.mul_(m)
        if step == gmp.last_step:  # from here on the sparse run is VNMLinear on sparse products
            sparse_model = gmp.finish(sparse_model)
            opt_s = torch.optim.SGD(sparse_model.parameters(), lr=0.05, momentum=0.9)
        if step % 20 == 0 or step == STEPS - 1:
            print(f"{step:>5} {target:>8.3f} {losses[0]:>12.5f} {losses[1]:>13.5f}")
    gap = losses[0] / losses[1] - 1.0
    print(f"final loss: sparse {losses[0]:.5f}, masked dense {losses[1]:.5f}: {100 * gap:+.1f}% "
          f"({'within' if abs(gap) <= 0.05 else 'NOT within'} 5%)")


if __name__ == "__main__":
    main()
