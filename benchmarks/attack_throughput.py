"""Victims·steps per second of gradient inversion: a plain research-style loop against leakshield's
automatic choice (``path: auto``), in one run, with the PSNR each reaches on the same victims.

The plain loop is written the way the usual research code is: one victim at a time, the dummy gradient
by ``autograd.grad(create_graph=True)``, ``loss.backward()`` for the image, ``loss.item()`` every step
(a host sync). The same recipe (IG: cosine + TV 1e-4, signed Adam lr 0.1, milestones, boxed; known
labels; batch 1 per victim; digits 32×32×3, untrained models) runs through leakshield, which calibrates
and picks the loop, the vmapped step or the compiled vmapped step. Throughput is reported with and
without the one-off costs (calibration, compilation), which a long attack (IG's 24,000 steps)
amortizes. ``idlg``: torch.optim.LBFGS one victim at a time against leakshield's batched L-BFGS
(its automatic choice, and its compiled evaluation). ``fedavg``: a path that runs one victim at a time
(FedAvg unrolling), in one process against victim shards.

    python benchmarks/attack_throughput.py [--device cpu] [--threads 2] [--shards 2]
        [--only lenet,lenet64,convnet,dmlp,idlg,fedavg]
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from leakshield.attacks import create_attack
from leakshield.attacks.passive.labels import resolve_labels
from leakshield.data import load_dataset
from leakshield.fl import server_view_of
from leakshield.metrics import psnr
from leakshield.models import create_model
from leakshield.schedules import ig_step_schedule

SETTINGS = {  # model, params, victims, steps
    "lenet": ("lenet", None, 16, 1000),
    "lenet64": ("lenet", None, 64, 300),  # 64 victims: where the ≈ 15× target was reached
    "convnet": ("convnet", {"width": 32}, 16, 100),
    "dmlp": ("dmlp", None, 8, 50),
}


def victims(model_name, params, count, device, labels_known=True):
    data = load_dataset("digits", {"channels": 3, "size": 32})
    model = create_model(model_name, params, in_shape=data.info.shape, num_classes=10).eval().to(device)
    views = [
        server_view_of(model, data.train.subset([i]).to(device), data.info, labels_known=labels_known)
        for i in range(count)
    ]
    return data, views, data.train.x[:count]


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def plain_ig(view, steps: int, seed: int) -> torch.Tensor:
    """One victim, research-code style (see the module docstring)."""
    model, info = view.model, view.data_info
    device = next(model.parameters()).device
    params = [p for _, p in model.named_parameters()]
    target = [view.update.delta[n].to(device) for n, _ in model.named_parameters()]
    lo, hi = info.normalized_bounds(torch.zeros(1, *info.shape, device=device))
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(1, *info.shape, generator=gen).to(device).requires_grad_(True)
    opt = torch.optim.Adam([x], lr=0.1)
    sched = ig_step_schedule(opt, steps)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        task = F.cross_entropy(model(x), view.labels.to(device))
        dummy = torch.autograd.grad(task, params, create_graph=True)
        dot = sum((d * t).sum() for d, t in zip(dummy, target, strict=True))
        norm_d = sum(d.pow(2).sum() for d in dummy).sqrt()
        norm_t = sum(t.pow(2).sum() for t in target).sqrt()
        tv = (x[..., 1:] - x[..., :-1]).abs().mean() + (x[..., 1:, :] - x[..., :-1, :]).abs().mean()
        loss = 1 - dot / (norm_d * norm_t) + 1e-4 * tv
        loss.backward()
        x.grad.sign_()
        opt.step()
        sched.step()
        with torch.no_grad():
            x.copy_(torch.max(torch.min(x, hi), lo))
        losses.append(loss.item())  # a host sync every step
    return info.denormalize(x.detach()).clamp(0, 1).cpu()


def plain_idlg(view, iterations: int, seed: int) -> torch.Tensor:
    """torch.optim.LBFGS on one victim (iDLG: L2, label from the last layer, stop at 1e-6)."""
    model, info = view.model, view.data_info
    device = next(model.parameters()).device
    params = [p for _, p in model.named_parameters()]
    target = [view.update.delta[n].to(device) for n, _ in model.named_parameters()]
    labels, _ = resolve_labels(view, "infer", device)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(1, *info.shape, generator=gen).to(device).requires_grad_(True)
    opt = torch.optim.LBFGS([x], lr=1.0, max_iter=20, history_size=100, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        dummy = torch.autograd.grad(F.cross_entropy(model(x), labels), params, create_graph=True)
        loss = sum(((d - t) ** 2).sum() for d, t in zip(dummy, target, strict=True))
        loss.backward()
        return loss

    for _ in range(iterations):
        loss = opt.step(closure).item()
        if loss < 1e-6:
            break
    return info.denormalize(x.detach()).clamp(0, 1).cpu(), loss


def run_ig(name: str, device: torch.device, steps: int | None, shards: int) -> None:
    model_name, params, count, default_steps = SETTINGS[name]
    steps = steps or default_steps
    _, views, truth = victims(model_name, params, count, device)
    plain_ig(views[0], 3, 0)  # warm-up
    sync(device)
    start = time.perf_counter()
    plain = torch.cat([plain_ig(v, steps, k) for k, v in enumerate(views)])
    sync(device)
    plain_s = time.perf_counter() - start
    attack = create_attack("ig", {"iterations": steps, "labels": "known", "compile_after": 0.0})
    start = time.perf_counter()
    out = attack.reconstruct_many(views, seeds=list(range(count)))
    sync(device)
    auto_s = time.perf_counter() - start
    stats = out[0].stats
    again = time.perf_counter()  # the same call again: the decision is remembered, the compilation cached
    attack.reconstruct_many(views, seeds=list(range(count)))
    sync(device)
    steady_s = time.perf_counter() - again
    auto = torch.cat([r.images for r in out])
    work = count * steps
    print(
        f"{name:<8} {count} victims × {steps} steps: plain {work / plain_s:8.1f} v·s/s "
        f"(PSNR {float(psnr(plain, truth).mean()):5.2f})  auto[{stats['path']}] "
        f"{work / auto_s:8.1f} incl. one-off, {work / steady_s:8.1f} rerun "
        f"(PSNR {float(psnr(auto, truth).mean()):5.2f})  ratio {plain_s / auto_s:5.2f}× / "
        f"{plain_s / steady_s:5.2f}×  calibration {_calibration(stats)}",
        flush=True,
    )
    if shards > 1 and device.type == "cpu":  # the same attack in single-threaded victim-shard processes
        attack = create_attack(
            "ig", {"iterations": steps, "labels": "known", "compile_after": 0.0, "victim_shards": shards}
        )
        timings = []
        for _ in range(2):  # the second call: the decision and the compiled code come from the disk caches
            start = time.perf_counter()
            out = attack.reconstruct_many(views, seeds=list(range(count)))
            timings.append(time.perf_counter() - start)
        auto = torch.cat([r.images for r in out])
        print(
            f"{'':<8} {shards} shards × 1 thread [{out[0].stats['path']}] {work / timings[0]:8.1f} incl. "
            f"one-off, {work / timings[1]:8.1f} rerun (PSNR {float(psnr(auto, truth).mean()):5.2f})  ratio "
            f"{plain_s / timings[0]:5.2f}× / {plain_s / timings[1]:5.2f}×",
            flush=True,
        )


def run_idlg(device: torch.device, iterations: int) -> None:
    _, views, truth = victims("lenet", None, 16, device, labels_known=False)
    start = time.perf_counter()
    done = [plain_idlg(v, iterations, k) for k, v in enumerate(views)]
    plain_s = time.perf_counter() - start
    plain = torch.cat([images for images, _ in done])
    plain_solved = sum(loss < 1e-6 for _, loss in done)
    print(
        f"idlg     16 victims × {iterations} L-BFGS steps: one by one {plain_s:6.1f} s "
        f"(PSNR {float(psnr(plain, truth).mean()):5.2f}, {plain_solved}/16 below 1e-6)",
        flush=True,
    )
    for label, params in (("auto", {}), ("compiled", {"path": "compiled"})):
        attack = create_attack("idlg", {"iterations": iterations, **params})
        start = time.perf_counter()
        out = attack.reconstruct_many(views, seeds=list(range(16)))
        sync(device)
        auto_s = time.perf_counter() - start
        again = time.perf_counter()
        attack.reconstruct_many(views, seeds=list(range(16)))
        sync(device)
        steady_s = time.perf_counter() - again
        auto = torch.cat([r.images for r in out])
        solved = sum(r.stats["grad_distance"] < 1e-6 for r in out)
        print(
            f"         {label:<8} [{out[0].stats['path']}] {auto_s:6.1f} s incl. one-off, {steady_s:6.1f} s "
            f"rerun (PSNR {float(psnr(auto, truth).mean()):5.2f}, {solved}/16 below 1e-6)  ratio "
            f"{plain_s / auto_s:5.2f}× / {plain_s / steady_s:5.2f}×  "
            f"calibration {_calibration(out[0].stats)}",
            flush=True,
        )


def run_fedavg(device: torch.device, steps: int | None, shards: int) -> None:
    """A path that cannot vectorize (FedAvg unrolling: 2 local epochs of 2 images each): one by one in
    one process against the same victims in ``shards`` single-threaded victim-shard processes."""
    from leakshield.fl import LocalTraining

    steps = steps or 500
    data = load_dataset("digits", {"channels": 3, "size": 32})
    model = create_model("lenet", None, in_shape=data.info.shape, num_classes=10).eval().to(device)
    local = LocalTraining(algorithm="fedavg", batch_size=2, local_epochs=2, shuffle=False)
    views = [
        server_view_of(
            model, data.train.subset([2 * i, 2 * i + 1]).to(device), data.info, local=local, labels_known=True
        )
        for i in range(8)
    ]
    truth = torch.cat([data.train.x[2 * i : 2 * i + 2] for i in range(8)])
    timings, images = {}, {}
    for label, extra in (("one process", {}), (f"{shards} shards", {"victim_shards": shards})):
        attack = create_attack("ig", {"iterations": steps, "labels": "known", **extra})
        start = time.perf_counter()
        out = attack.reconstruct_many(views, seeds=list(range(8)))
        timings[label] = time.perf_counter() - start
        images[label] = torch.cat([r.images for r in out])
    (one, one_s), (many, many_s) = timings.items()
    print(
        f"fedavg   8 victims × {steps} steps (FedAvg unrolled, one by one): {one} {one_s:6.1f} s "
        f"(PSNR {float(psnr(images[one], truth).mean()):5.2f}), {many} {many_s:6.1f} s "
        f"(PSNR {float(psnr(images[many], truth).mean()):5.2f})  ratio {one_s / many_s:5.2f}×",
        flush=True,
    )


def _calibration(stats: dict) -> str:
    parts = [
        f"{k[12:-2]} {v * 1e3:.2f} ms"
        for k, v in stats.items()
        if k.startswith("calibration_") and k.endswith("_s")
    ]
    return ", ".join(parts) or "remembered"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=None, help="override each model's step budget")
    parser.add_argument("--idlg-iterations", type=int, default=300)
    parser.add_argument("--shards", type=int, default=2, help="also run IG in this many victim shards (CPU)")
    parser.add_argument("--only", default="lenet,lenet64,convnet,dmlp,idlg,fedavg")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {args.threads} threads"
    print(f"torch {torch.__version__}, {name}; v·s/s = victims·steps per second")
    for which in args.only.split(","):
        if which == "idlg":
            run_idlg(device, args.idlg_iterations)
        elif which == "fedavg":
            run_fedavg(device, args.steps, max(args.shards, 2))
        else:
            run_ig(which, device, args.steps, args.shards)


if __name__ == "__main__":
    main()
