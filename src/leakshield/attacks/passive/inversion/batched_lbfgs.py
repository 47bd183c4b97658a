"""L-BFGS for many independent victims at once: every victim runs ``torch.optim.LBFGS`` (strong-Wolfe
line search) as the one-victim engine does, and the two expensive parts are batched over victims.

Each victim's optimizer is a generator (:func:`_victim`) that follows, decision for decision, the
engine's one-victim L-BFGS (:func:`~leakshield.attacks.passive.inversion.loops.optimize_one`: outer steps of
up to ``lbfgs_max_iter`` iterations and ``5/4`` as many evaluations, torch's stopping rules, the box after
each outer step, the best iterate seen) with ``torch.optim.LBFGS.step`` and its strong-Wolfe line search
inside. Its scalar logic runs per victim; it yields where the work is:

- an **evaluation** of the objective at a point: the driver collects one from every running victim and
  runs them as one vectorized step (vmapped or compiled);
- a **direction** −H·g: :class:`History` holds every victim's curvature pairs in one tensor and computes
  all the products at once in the compact representation (Byrd, Nocedal & Schnabel 1994; Nocedal &
  Wright, *Numerical Optimization*, eq. 7.24), which equals torch's two-loop recursion in exact
  arithmetic (tested to float rounding) and costs two batched matrix products over the memory instead of
  4·m small vector operations per victim.

So each victim takes the path the one-victim engine would take, up to float rounding (which L-BFGS's
line search amplifies over many iterations). Measured history: a first batched L-BFGS with per-victim
Armijo backtracking instead of strong Wolfe left 3 of 16 iDLG victims stalled at a gradient distance
of 8–31 where torch's reaches 1e-6; the next version ran torch's own optimizer per victim in threads
with batched evaluations and gained only 1.3×, its per-victim two-loop recursion (≈ 1.5 ms per iteration
on LeNet, as much as an evaluation) left unbatched.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from leakshield.attacks.passive.inversion.params import GradientInversionParams

# torch.optim.LBFGS's defaults, which the one-victim engine keeps
TOLERANCE_GRAD, TOLERANCE_CHANGE = 1e-7, 1e-9
C1, C2 = 1e-4, 0.9  # sufficient decrease and curvature constants of the strong-Wolfe search

#: (victim indices, their flat points V' × D) → (loss incl. priors, gradient distance, flat gradients)
BatchEvaluate = Callable[[list[int], torch.Tensor], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


@dataclass
class _Evaluate:
    point: torch.Tensor
    direction: torch.Tensor | None = None  # the line search's: the reply carries the slope along it


@dataclass
class _Direction:
    grad: torch.Tensor
    prev_grad: torch.Tensor
    direction: torch.Tensor
    step: float


class History:
    """Every victim's last ``size`` curvature pairs (s, y) in one ring buffer, with their inner products
    s_i·y_j and y_i·y_j kept up to date, and the batched quasi-Newton direction."""

    def __init__(self, victims: int, size: int, dim: int, device: torch.device, dtype: torch.dtype) -> None:
        self.m = size
        self.pairs = torch.zeros(victims, 2 * size, dim, device=device, dtype=dtype)  # rows: s then y
        self.sy = torch.zeros(victims, size, size, device=device, dtype=dtype)
        self.yy = torch.zeros(victims, size, size, device=device, dtype=dtype)
        self.count = torch.zeros(victims, dtype=torch.long, device=device)
        self.head = torch.zeros(victims, dtype=torch.long, device=device)  # oldest slot once full
        self.gamma = torch.ones(victims, device=device, dtype=dtype)  # H₀ = γI, γ = sᵀy/yᵀy (latest)

    def update_and_direct(self, rows: list[int], requests: list[_Direction]) -> torch.Tensor:
        """For each requesting victim: store the pair (s = t·d, y = g − g_prev) if sᵀy > 1e-10 (dropping
        the oldest when full, as torch does), then return −H·g, one row per request."""
        victims, dim = self.pairs.shape[0], self.pairs.shape[2]
        z = self.pairs.new_zeros
        grad, prev, direction, step = z(victims, dim), z(victims, dim), z(victims, dim), z(victims)
        index = torch.tensor(rows, device=grad.device)
        grad[index] = torch.stack([r.grad for r in requests])
        prev[index] = torch.stack([r.prev_grad for r in requests])
        direction[index] = torch.stack([r.direction for r in requests])
        step[index] = torch.tensor([r.step for r in requests], dtype=grad.dtype, device=grad.device)
        s, y = direction * step[:, None], grad - prev
        # one pass over the memory: its inner products with s, y and g (for every victim: indexing the
        # memory first would copy it, which is slower)
        products = torch.bmm(self.pairs, torch.stack([s, y, grad], 2))
        inner = products[..., 2]
        self._store(index, s, y, grad, products[..., :2], inner)
        return -self._product(grad, inner)[index]

    def _store(self, rows: torch.Tensor, s, y, grad, products: torch.Tensor, inner: torch.Tensor) -> None:
        """Store the pairs with sᵀy > 1e-10; ``products``: the memory's inner products with s and y
        before the update; ``inner``: with g, corrected here for the replaced slots."""
        m = self.m
        ys, yy = (y * s).sum(1), (y * y).sum(1)
        keep = torch.zeros_like(ys, dtype=torch.bool)
        keep[rows] = ys[rows] > 1e-10
        vi = keep.nonzero().flatten()
        if not len(vi):
            return
        products = products[vi]
        full = self.count[vi] == m
        slot = torch.where(full, self.head[vi], self.count[vi])
        self.pairs[vi, slot], self.pairs[vi, m + slot] = s[vi], y[vi]
        self.sy[vi, slot, :] = products[:, m:, 0]  # s_new · y_j
        self.sy[vi, :, slot] = products[:, :m, 1]  # s_i · y_new
        self.sy[vi, slot, slot] = ys[vi]
        self.yy[vi, slot, :] = products[:, m:, 1]
        self.yy[vi, :, slot] = products[:, m:, 1]
        self.yy[vi, slot, slot] = yy[vi]
        self.count[vi] = torch.clamp(self.count[vi] + 1, max=m)
        self.head[vi] = torch.where(full, (self.head[vi] + 1) % m, self.head[vi])
        self.gamma[vi] = ys[vi] / yy[vi]
        inner[vi, slot], inner[vi, m + slot] = (s[vi] * grad[vi]).sum(1), (y[vi] * grad[vi]).sum(1)

    def _product(self, grad: torch.Tensor, inner: torch.Tensor) -> torch.Tensor:
        """H·g for every victim: H = γI + [S γY] M [S γY]ᵀ (compact form), in chronological order;
        ``inner``: the memory's inner products with g."""
        victims, m = grad.shape[0], self.m
        steps = torch.arange(m, device=grad.device)
        order = (self.head[:, None] + steps) % m  # logical (oldest first) → physical slot
        valid = steps[None] < self.count[:, None]
        both = valid[:, :, None] & valid[:, None, :]
        gamma = self.gamma[:, None]
        a = inner[:, :m].gather(1, order) * valid  # Sᵀg
        b = gamma * inner[:, m:].gather(1, order) * valid  # γYᵀg
        sy, yy = _reorder(self.sy, order), _reorder(self.yy, order)
        eye = torch.diag_embed((~valid).to(grad.dtype))
        upper = torch.where(both, torch.triu(sy), 0.0) + eye  # R, the identity on empty slots
        diag = torch.diag_embed(torch.diagonal(sy, dim1=1, dim2=2) * valid)
        u = torch.linalg.solve_triangular(upper, a[..., None], upper=True)
        rhs = torch.bmm(diag + gamma[..., None] * torch.where(both, yy, 0.0), u) - b[..., None]
        w = torch.linalg.solve_triangular(upper.transpose(1, 2), rhs, upper=False)
        coef = grad.new_zeros(victims, 2 * m)
        coef[:, :m] = coef[:, :m].scatter(1, order, w[..., 0] * valid)
        coef[:, m:] = coef[:, m:].scatter(1, order, -gamma * u[..., 0] * valid)
        return gamma * grad + torch.bmm(coef[:, None, :], self.pairs)[:, 0]


def _reorder(matrix: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    m = order.shape[1]
    rows = matrix.gather(1, order[:, :, None].expand(-1, m, m))
    return rows.gather(2, order[:, None, :].expand(-1, m, m))


def _cubic_minimum(x1, f1, g1, x2, f2, g2, bounds=None) -> float:
    """Minimizer of the cubic through (x1, f1, f'=g1) and (x2, f2, f'=g2), clipped to ``bounds`` (default:
    the interval); its midpoint when the cubic has no minimum (Nocedal & Wright, eq. 3.59)."""
    lo, hi = bounds if bounds is not None else (min(x1, x2), max(x1, x2))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    square = d1 * d1 - g1 * g2
    if square < 0:
        return (lo + hi) / 2.0
    d2 = math.sqrt(square)
    if x1 <= x2:
        minimum = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    else:
        minimum = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
    return min(max(minimum, lo), hi)


Requests = Generator["_Evaluate | _Direction", object, object]


def _evaluate(point: torch.Tensor, direction: torch.Tensor | None = None) -> Requests:
    """(loss, (gradient, its largest magnitude), slope along ``direction``): the scalars come from the
    driver, computed for every victim of an evaluation round at once (on a GPU each read of a scalar is a
    synchronization)."""
    loss, grad, grad_max, slope = yield _Evaluate(point, direction)
    return loss, (grad, grad_max), slope


def _strong_wolfe(x, t: float, d, d_max: float, f: float, g, gtd: float, max_ls: int) -> Requests:
    """torch.optim.LBFGS's line search (a port of minFunc's): bracket a step satisfying the strong
    Wolfe conditions, then zoom by safeguarded cubic interpolation. ``g``: (gradient, its largest
    magnitude); ``d_max``: the direction's. Returns (f, g, t, evaluations)."""
    f_new, g_new, gtd_new = yield from _evaluate(x + t * d, d)
    evals = 1
    t_prev, f_prev, g_prev, gtd_prev = 0.0, f, g, gtd
    done, ls_iter = False, 0
    bracket, bracket_f, bracket_g, bracket_gtd = [], [], [], []
    while ls_iter < max_ls:
        if f_new > f + C1 * t * gtd or (ls_iter > 1 and f_new >= f_prev):
            bracket, bracket_f, bracket_g = [t_prev, t], [f_prev, f_new], [g_prev, g_new]
            bracket_gtd = [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -C2 * gtd:
            bracket, bracket_f, bracket_g, done = [t], [f_new], [g_new], True
            break
        if gtd_new >= 0:
            bracket, bracket_f, bracket_g = [t_prev, t], [f_prev, f_new], [g_prev, g_new]
            bracket_gtd = [gtd_prev, gtd_new]
            break
        bounds = (t + 0.01 * (t - t_prev), t * 10)
        t_prev, t = t, _cubic_minimum(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, bounds)
        f_prev, g_prev, gtd_prev = f_new, g_new, gtd_new
        f_new, g_new, gtd_new = yield from _evaluate(x + t * d, d)
        evals, ls_iter = evals + 1, ls_iter + 1
    if ls_iter == max_ls:
        bracket, bracket_f, bracket_g = [0.0, t], [f, f_new], [g, g_new]
    insufficient = False
    low, high = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(bracket[1] - bracket[0]) * d_max < TOLERANCE_CHANGE:
            break
        t = _cubic_minimum(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1], bracket_gtd[1])
        # too close to an end of the bracket twice in a row, or outside it: 0.1 of its length inside
        top, bottom = max(bracket), min(bracket)
        eps = 0.1 * (top - bottom)
        if min(top - t, t - bottom) < eps:
            if insufficient or t >= top or t <= bottom:
                t = top - eps if abs(t - top) < abs(t - bottom) else bottom + eps
                insufficient = False
            else:
                insufficient = True
        else:
            insufficient = False
        f_new, g_new, gtd_new = yield from _evaluate(x + t * d, d)
        evals, ls_iter = evals + 1, ls_iter + 1
        if f_new > f + C1 * t * gtd or f_new >= bracket_f[low]:
            bracket[high], bracket_f[high], bracket_g[high], bracket_gtd[high] = t, f_new, g_new, gtd_new
            low, high = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -C2 * gtd:
                done = True
            elif gtd_new * (bracket[high] - bracket[low]) >= 0:
                bracket[high], bracket_f[high] = bracket[low], bracket_f[low]
                bracket_g[high], bracket_gtd[high] = bracket_g[low], bracket_gtd[low]
            bracket[low], bracket_f[low], bracket_g[low], bracket_gtd[low] = t, f_new, g_new, gtd_new
    return bracket_f[low], bracket_g[low], bracket[low], evals


def _victim(
    p: GradientInversionParams, x: torch.Tensor, box: Callable, solved: Callable[[], bool]
) -> Requests:
    """One victim's L-BFGS restart as the one-victim engine runs it: ``p.iterations`` calls of
    ``torch.optim.LBFGS.step`` (state kept between them), stopping when the loss is not finite or the
    best gradient distance is below ``p.tolerance``, the box applied after each call, and after the call
    in which its evaluations reach ``p.lbfgs_max_evaluations``. Returns (evaluations, whether that bound
    stopped it)."""
    max_iter, max_eval = p.lbfgs_max_iter, p.lbfgs_max_iter * 5 // 4
    total = spent_in_all = 0
    d = prev_grad = None
    t, prev_loss = 0.0, 0.0
    for _ in range(p.iterations):
        first_loss, (grad, grad_max), _ = yield from _evaluate(x)
        loss, evals, n_iter = first_loss, 1, 0
        while grad_max > TOLERANCE_GRAD and n_iter < max_iter:
            n_iter, total = n_iter + 1, total + 1
            if total == 1:
                d, d_max = -grad, grad_max
                gtd = float(grad.dot(d))
            else:
                d, gtd, d_max = yield _Direction(grad, prev_grad, d, t)
            prev_grad, prev_loss = grad, loss
            t = min(1.0, 1.0 / float(grad.abs().sum())) * p.lr if total == 1 else p.lr
            if gtd > -TOLERANCE_CHANGE:
                break
            if p.lbfgs_line_search == "strong_wolfe":
                here = (grad, grad_max)
                loss, (grad, grad_max), t, spent = yield from _strong_wolfe(
                    x, t, d, d_max, loss, here, gtd, max_eval - evals
                )
                x = x + t * d
            else:
                x, spent = x + t * d, 0
                if n_iter != max_iter:
                    (loss, (grad, grad_max), _), spent = (yield from _evaluate(x)), 1
            evals += spent
            if n_iter == max_iter or evals >= max_eval or grad_max <= TOLERANCE_GRAD:
                break
            if d_max * t <= TOLERANCE_CHANGE or abs(loss - prev_loss) < TOLERANCE_CHANGE:
                break
        spent_in_all += evals
        if not math.isfinite(first_loss) or not bool(torch.isfinite(x).all()) or solved():
            return spent_in_all, False
        x = box(x)
        if p.lbfgs_max_evaluations is not None and spent_in_all >= p.lbfgs_max_evaluations:
            return spent_in_all, True
    return spent_in_all, False


def lbfgs_many(
    p: GradientInversionParams,
    start: torch.Tensor,
    evaluate: BatchEvaluate,
    box: Callable[[torch.Tensor], torch.Tensor],
    remember: Callable[[list[int], torch.Tensor, torch.Tensor, torch.Tensor], None],
    solved: Callable[[int], bool],
    progress: bool = False,
    host: torch.device | None = None,
) -> dict[int, tuple[int, bool]]:
    """Run one L-BFGS restart for every row of ``start`` (V × D flat variables). ``evaluate`` is called
    with the victims still running and their points; ``remember(victims, points, loss, distance)`` sees
    every evaluation (the caller keeps the best iterate); ``solved(v)`` stops a victim. ``progress``
    shows the evaluation rounds and the victims still running. ``host``: keep the per-victim
    bookkeeping (points, directions, curvature pairs, the line search's scalars) on that device, and
    only the evaluations on ``start``'s (a GPU then holds no curvature pairs). The scalars the line
    searches read are computed for all victims of a round at once and read in one transfer. Returns each
    victim's (evaluations, whether ``lbfgs_max_evaluations`` stopped it)."""
    victims, device = len(start), start.device
    keep = host if host is not None else device
    start = start.to(keep)
    bar = tqdm(desc="batched L-BFGS (evaluations)", disable=not progress, leave=False)
    memory = History(victims, p.lbfgs_history, start.shape[1], keep, start.dtype)
    runs = {v: _victim(p, start[v].clone(), box, lambda v=v: solved(v)) for v in range(victims)}
    requests = {v: next(run) for v, run in runs.items()}
    ended: dict[int, tuple[int, bool]] = {}
    while requests:
        asking = sorted(v for v, r in requests.items() if isinstance(r, _Direction))
        if asking:
            asked: list[_Direction] = [requests[v] for v in asking]  # type: ignore[misc]
            directions = memory.update_and_direct(asking, asked)
            slope = (torch.stack([r.grad for r in asked]) * directions).sum(1)
            slopes, largest = torch.stack([slope, directions.abs().amax(1)]).tolist()  # one read
            replies = {v: (directions[i], slopes[i], largest[i]) for i, v in enumerate(asking)}
        else:
            running = sorted(requests)
            evaluations: list[_Evaluate] = [requests[v] for v in running]  # type: ignore[misc]
            points = torch.stack([r.point for r in evaluations]).to(device)
            loss, distance, grads = evaluate(running, points)
            remember(running, points, loss, distance)
            grads = grads.to(keep)
            zero = grads.new_zeros(grads.shape[1])
            along = torch.stack([zero if r.direction is None else r.direction for r in evaluations])
            wide = torch.float64  # the loss at its own precision or better (the Armijo test reads it)
            scalars = torch.stack(
                [loss.to(keep, wide), grads.abs().amax(1).to(wide), (grads * along).sum(1).to(wide)]
            )
            values, largest, slopes = scalars.tolist()  # one read for the whole round
            replies = {v: (values[i], grads[i], largest[i], slopes[i]) for i, v in enumerate(running)}
            bar.update()
            bar.set_postfix(running=len(running), lowest_loss=f"{min(values):.3g}")
        for v, reply in replies.items():
            try:
                requests[v] = runs[v].send(reply)
            except StopIteration as stop:
                del requests[v]
                ended[v] = stop.value
    bar.close()
    return ended
