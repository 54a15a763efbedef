"""Classical ML ops of the ``ai.onnx.ml`` domain: Binarizer, ArrayFeatureExtractor, TreeEnsemble.

A tree ensemble is static (its nodes are attributes), so it is compiled into matrices at load
time: every node's test runs on every sample at once, and a leaf is reached when all the tests
on its path come out as the path needs, counted by one matmul with the path matrix. The leaf
values then aggregate by a second matmul (sum, average) or a masked reduction (min, max).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as dt
from ..tensor import Tensor
from ._registry import NodeCtx, op
from ._values import Value, const_tensor

__all__: list[str] = []

ML = "ai.onnx.ml"


@op("Binarizer", domain=ML)
def _binarizer(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    one, zero = (Tensor.const(np.array(v, x.dtype.np)) for v in (1, 0))
    return Tensor.select(x > float(n.attr("threshold", 0.0)), one, zero)


@op("ArrayFeatureExtractor", domain=ML)
def _array_feature_extractor(n: NodeCtx, ins: list[Value | None]) -> Value:
    x, index = n.t(ins[0]), n.t(ins[1]).cast(dt.int64).reshape(-1)
    if x.ndim == 1:
        x = x.reshape(1, x.shape[0])
    return x.gather(x.ndim - 1, index)


def _array(v: Any) -> np.ndarray:
    return np.asarray(v)


def _leaf_paths(a: dict[str, Any]) -> list[tuple[list[tuple[int, bool]], int]]:
    """Every leaf of every tree with the (node, outcome) tests on its path, in ONNX's node order."""
    true_ids, false_ids = _array(a["nodes_truenodeids"]), _array(a["nodes_falsenodeids"])
    true_leaf, false_leaf = _array(a["nodes_trueleafs"]), _array(a["nodes_falseleafs"])
    out: list[tuple[list[tuple[int, bool]], int]] = []

    def walk(index: int, is_leaf: bool, path: list[tuple[int, bool]]) -> None:
        if is_leaf:
            out.append((path, index))
            return
        if len(path) > len(true_ids):
            raise ValueError("the tree has a cycle")
        walk(int(true_ids[index]), bool(true_leaf[index]), [*path, (index, True)])
        walk(int(false_ids[index]), bool(false_leaf[index]), [*path, (index, False)])

    for root in _array(a["tree_roots"]).reshape(-1):
        r = int(root)
        single = bool(true_leaf[r]) and bool(false_leaf[r]) and true_ids[r] == false_ids[r]
        walk(r, single, [])
    return out


def _member_sets(
    a: dict[str, Any], modes: np.ndarray, paths: list[tuple[list[tuple[int, bool]], int]]
) -> dict[int, list[float]]:
    """The set of each MEMBER node: ``membership_values`` split at NaNs, in the order the trees
    visit the nodes (as ONNX's reference reads them)."""
    values = list(_array(a.get("membership_values", np.zeros(0))).reshape(-1))
    order: list[int] = []
    for path, _ in paths:
        for node, _ in path:
            if modes[node] == 6 and node not in order:
                order.append(node)
    sets: dict[int, list[float]] = {}
    for node in order:
        members: list[float] = []
        while values:
            v = float(values.pop(0))
            if np.isnan(v):
                break
            members.append(v)
        sets[node] = members
    return sets


@op("TreeEnsemble", since=5, domain=ML)
def _tree_ensemble(n: NodeCtx, ins: list[Value | None]) -> Value:
    x = n.t(ins[0])
    a = n.attrs
    modes = _array(a["nodes_modes"]).reshape(-1).astype(np.int64)
    splits = _array(a["nodes_splits"]).reshape(-1)
    features = _array(a["nodes_featureids"]).reshape(-1).astype(np.int64)
    tracks = _array(a.get("nodes_missing_value_tracks_true", np.zeros(len(modes)))).reshape(-1)
    try:
        paths = _leaf_paths(a)
    except (ValueError, IndexError, RecursionError) as exc:
        raise n.fail(f"malformed tree: {exc}") from None
    sets = _member_sets(a, modes, paths)
    count = len(modes)
    # every node's test on every sample: [S, nodes]
    feats = x.gather(1, Tensor.const(features))
    split = const_tensor(splits.astype(x.dtype.np))  # float64 thresholds stay float64
    tests = [feats <= split, feats < split, feats >= split, feats > split, feats == split, feats != split]
    cond: Tensor | None = None
    for mode, test in enumerate(tests):
        mask = modes == mode
        if mask.any():
            hit = test & Tensor.const(mask)
            cond = hit if cond is None else cond | hit
    if sets:
        members = sorted({v for s in sets.values() for v in s})
        table = np.zeros((count, max(len(members), 1)), bool)
        for node, s in sets.items():
            table[node, [members.index(v) for v in s]] = True
        values = const_tensor(np.array(members or [0.0], x.dtype.np)).reshape(1, 1, -1)
        hit = ((feats.unsqueeze(2) == values) & Tensor.const(table).unsqueeze(0)).cast(dt.int32).max(2) != 0
        cond = hit if cond is None else cond | hit
    if cond is None:
        cond = Tensor.zeros(list(feats.shape), dt.bool_)
    if tracks.any():
        cond = cond | ((feats != feats) & Tensor.const(tracks.astype(bool)))
    # a leaf is reached when every test on its path agrees: count agreements with two matmuls
    need_true = np.zeros((count, len(paths)), np.float32)
    need_false = np.zeros((count, len(paths)), np.float32)
    for p, (path, _) in enumerate(paths):
        for node, outcome in path:
            (need_true if outcome else need_false)[node, p] = 1.0
    c = cond.cast(dt.float32)
    agree = c @ Tensor.const(need_true) + (1.0 - c) @ Tensor.const(need_false)
    lengths = np.array([len(path) for path, _ in paths], np.float32)
    reached = agree == Tensor.const(lengths)  # [S, leaves]
    targets = int(a.get("n_targets", 1))
    weights = _array(a["leaf_weights"]).reshape(-1)
    ids = _array(a["leaf_targetids"]).reshape(-1).astype(np.int64)
    table = np.zeros((len(paths), targets), x.dtype.np)
    for p, (_, leaf) in enumerate(paths):
        table[p, ids[leaf]] = weights[leaf]
    agg = int(a.get("aggregate_function", 1))
    if agg in (0, 1):  # average, sum
        out = reached.cast(x.dtype) @ const_tensor(table)
        return out / float(len(_array(a["tree_roots"]).reshape(-1))) if agg == 0 else out
    if agg not in (2, 3):
        raise n.fail(f"aggregate_function {agg} is not one of 0 (average), 1 (sum), 2 (min), 3 (max)")
    at = np.zeros((len(paths), targets), bool)
    for p, (_, leaf) in enumerate(paths):
        at[p, ids[leaf]] = True
    info = np.finfo(x.dtype.np)  # type: ignore[type-var]
    empty = float(info.max if agg == 2 else info.min)
    picked = reached.unsqueeze(2) & Tensor.const(at).unsqueeze(0)
    vals = Tensor.select(picked, const_tensor(table).unsqueeze(0), empty)
    return vals.min(1) if agg == 2 else vals.max(1)
