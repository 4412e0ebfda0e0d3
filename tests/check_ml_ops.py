#!/usr/bin/env python3
"""kiln's ai.onnx.ml kernels against ONNX Runtime: random tree ensembles (classifiers with 2, 3
and 5 classes, regressors with every aggregate function, every branch mode, missing-value
tracking, NaN inputs, base values, every post_transform), linear classifiers and regressors,
Normalizer, Scaler and ZipMap, built with onnx.helper and run by `kiln run` and by ONNX Runtime
on the same inputs. Binary classifiers are where ONNX Runtime has rules of its own (one class's
weights only, one or two base values): kiln must give its labels and scores.

    tests/check_ml_ops.py [BUILD_DIR] [--cases N]

Exits non-zero when any output differs (labels exactly; scores within rtol 1e-4, atol 1e-5).
Needs PyPI's onnx, numpy and onnxruntime.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper
import onnxruntime as ort

MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]
POSTS = ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"]


def random_trees(rng, n_trees, features, targets, one_target=None, all_leq=False, positive=False):
    """nodes_* and leaf-weight attributes of random trees, node ids shuffled within each tree,
    tree ids sparse."""
    a = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes", "nodes_values",
                         "nodes_truenodeids", "nodes_falsenodeids", "nodes_missing_value_tracks_true")}
    w = {k: [] for k in ("treeids", "nodeids", "ids", "weights")}
    for t in range(n_trees):
        tree_id = int(t * 3 + 1)  # sparse, not 0..n-1
        depth = int(rng.integers(0, 5))
        count = [0]
        nodes = []

        def grow(d):
            i = count[0]
            count[0] += 1
            nodes.append(None)
            if d == 0 or rng.random() < 0.2:
                nodes[i] = ("LEAF",)
            else:
                tc = grow(d - 1)
                fc = grow(d - 1)
                mode = "BRANCH_LEQ" if all_leq else str(rng.choice(MODES))
                thr = float(np.float32(rng.choice([rng.normal(), 0.0, 0.5])))
                nodes[i] = (mode, int(rng.integers(0, features)), thr, tc, fc, int(rng.random() < 0.5))
            return i

        grow(depth)
        # Node ids 0..n-1 (ONNX Runtime needs them so), the root 0, the others shuffled.
        ids = np.concatenate([[0], 1 + rng.permutation(len(nodes) - 1)])
        for i, n in enumerate(nodes):
            a["nodes_treeids"].append(tree_id)
            a["nodes_nodeids"].append(int(ids[i]))
            if n[0] == "LEAF":
                a["nodes_modes"].append("LEAF")
                a["nodes_featureids"].append(0)
                a["nodes_values"].append(0.0)
                a["nodes_truenodeids"].append(0)
                a["nodes_falsenodeids"].append(0)
                a["nodes_missing_value_tracks_true"].append(0)
                for tgt in ([one_target] if one_target is not None else rng.choice(targets, size=int(rng.integers(1, targets + 1)), replace=False)):
                    w["treeids"].append(tree_id)
                    w["nodeids"].append(int(ids[i]))
                    w["ids"].append(int(tgt))
                    v = float(rng.random()) if positive else float(rng.normal())
                    w["weights"].append(v)
            else:
                mode, f, thr, tc, fc, miss = n
                a["nodes_modes"].append(mode)
                a["nodes_featureids"].append(f)
                a["nodes_values"].append(thr)
                a["nodes_truenodeids"].append(int(ids[tc]))
                a["nodes_falsenodeids"].append(int(ids[fc]))
                a["nodes_missing_value_tracks_true"].append(miss)
    return a, w


def inputs(rng, rows, features):
    x = rng.normal(size=(rows, features)).astype(np.float32)
    x[rng.random(x.shape) < 0.1] = 0.0
    x[rng.random(x.shape) < 0.05] = 0.5
    x[rng.random(x.shape) < 0.05] = np.nan
    return x


def model(node, features, outputs):
    g = oh.make_graph([node], "g", [oh.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [None, features])], outputs)
    return oh.make_model(g, ir_version=8, opset_imports=[oh.make_opsetid("", 13), oh.make_opsetid("ai.onnx.ml", 3)])


def classifier(rng, classes, binary_one_class=False):
    features = int(rng.integers(1, 6))
    one = int(rng.integers(0, 2)) if binary_one_class else None
    a, w = random_trees(rng, int(rng.integers(1, 12)), features, classes, one_target=one,
                        all_leq=rng.random() < 0.5, positive=rng.random() < 0.5)
    attrs = dict(a, class_treeids=w["treeids"], class_nodeids=w["nodeids"], class_ids=w["ids"], class_weights=w["weights"],
                 post_transform=str(rng.choice(POSTS)))
    if classes == 2 and not binary_one_class:
        # With two classes both weighted, ONNX Runtime's labels are 0 and 1 whatever the class
        # labels are (kiln gives the class labels): there only [0, 1] is compared.
        attrs["classlabels_int64s"] = [0, 1]
        label_type = onnx.TensorProto.INT64
    elif rng.random() < 0.5:
        attrs["classlabels_int64s"] = [int(v) for v in rng.permutation(classes) * 10 + 3]
        label_type = onnx.TensorProto.INT64
    else:
        attrs["classlabels_strings"] = [f"c{i}" for i in range(classes)]
        label_type = onnx.TensorProto.STRING
    b = rng.integers(0, 3)
    if b == 1:
        # One base value for two classes both weighted leaves ONNX Runtime's second score
        # unwritten (uninitialized memory) where a row has no second-class weight: not generated.
        one = classes == 2 and binary_one_class and rng.random() < 0.5
        attrs["base_values"] = [float(rng.normal())] * (1 if one else classes)
    node = oh.make_node("TreeEnsembleClassifier", ["X"], ["Y", "Z"], domain="ai.onnx.ml", **attrs)
    return model(node, features, [oh.make_tensor_value_info("Y", label_type, [None]),
                                  oh.make_tensor_value_info("Z", onnx.TensorProto.FLOAT, [None, classes])]), features


def regressor(rng):
    features = int(rng.integers(1, 6))
    targets = int(rng.integers(1, 4))
    a, w = random_trees(rng, int(rng.integers(1, 12)), features, targets, all_leq=rng.random() < 0.5)
    attrs = dict(a, target_treeids=w["treeids"], target_nodeids=w["nodeids"], target_ids=w["ids"], target_weights=w["weights"],
                 n_targets=targets, aggregate_function=str(rng.choice(["SUM", "AVERAGE", "MIN", "MAX"])),
                 post_transform="NONE")
    if rng.random() < 0.5:
        attrs["base_values"] = [float(v) for v in rng.normal(size=targets)]
    node = oh.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain="ai.onnx.ml", **attrs)
    return model(node, features, [oh.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [None, targets])]), features


def linear(rng, kind):
    features = int(rng.integers(1, 6))
    if kind == "LinearRegressor":
        targets = int(rng.integers(1, 4))
        node = oh.make_node(kind, ["X"], ["Y"], domain="ai.onnx.ml", targets=targets,
                            coefficients=[float(v) for v in rng.normal(size=targets * features)],
                            intercepts=[float(v) for v in rng.normal(size=targets)])
        return model(node, features, [oh.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [None, targets])]), features
    classes = int(rng.integers(2, 5))
    scores = 1 if classes == 2 and rng.random() < 0.5 else classes
    node = oh.make_node(kind, ["X"], ["Y", "Z"], domain="ai.onnx.ml", classlabels_ints=list(range(classes)),
                        coefficients=[float(v) for v in rng.normal(size=scores * features)],
                        intercepts=[float(v) for v in rng.normal(size=scores)],
                        post_transform=str(rng.choice(["NONE", "LOGISTIC", "SOFTMAX"])))
    return model(node, features, [oh.make_tensor_value_info("Y", onnx.TensorProto.INT64, [None]),
                                  oh.make_tensor_value_info("Z", onnx.TensorProto.FLOAT, [None, None])]), features


def zipmap_chain(rng):
    """Normalizer -> Scaler -> ZipMap, the tail of skl2onnx's classifiers."""
    features = int(rng.integers(2, 6))
    nodes = [oh.make_node("Normalizer", ["X"], ["N"], domain="ai.onnx.ml", norm=str(rng.choice(["MAX", "L1", "L2"]))),
             oh.make_node("Scaler", ["N"], ["S"], domain="ai.onnx.ml", offset=[float(v) for v in rng.normal(size=features)],
                          scale=[float(v) for v in rng.normal(size=features)]),
             oh.make_node("ZipMap", ["S"], ["Z"], domain="ai.onnx.ml", classlabels_int64s=list(range(features)))]
    map_type = onnx.TypeProto()  # seq(map(int64, float)); onnx 1.12's helper has no make_map_type_proto
    map_type.map_type.key_type = onnx.TensorProto.INT64
    map_type.map_type.value_type.CopyFrom(oh.make_tensor_type_proto(onnx.TensorProto.FLOAT, []))
    out = oh.make_value_info("Z", oh.make_sequence_type_proto(map_type))
    g = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [None, features])], [out])
    return oh.make_model(g, ir_version=8, opset_imports=[oh.make_opsetid("", 13), oh.make_opsetid("ai.onnx.ml", 1)]), features


def run_kiln(kiln, path, x, out):
    xin = os.path.join(out, "x.pb")
    with open(xin, "wb") as f:
        f.write(onnx.numpy_helper.from_array(x, "X").SerializeToString())
    r = subprocess.run([kiln, "run", path, "-i", xin, "-o", out], capture_output=True, text=True)
    if r.returncode != 0:
        return "kiln run failed: " + r.stderr.strip()
    got = []
    k = 0
    while os.path.exists(os.path.join(out, f"output_{k}.pb")):
        data = open(os.path.join(out, f"output_{k}.pb"), "rb").read()
        got.append(data)
        k += 1
    return got


def decode(data, want):
    if isinstance(want, list):  # a sequence of maps
        s = onnx.SequenceProto()
        s.ParseFromString(data)
        return [{(m.string_keys or m.keys)[i]: float(onnx.numpy_helper.to_array(v)) for i, v in enumerate(m.values.tensor_values)}
                for m in s.map_values]
    t = onnx.TensorProto()
    t.ParseFromString(data)
    return onnx.numpy_helper.to_array(t)


def same(got, want):
    if isinstance(want, list):
        if len(got) != len(want):
            return False
        return all(sorted(g) == sorted(w) and np.allclose([g[k] for k in sorted(g)], [w[k] for k in sorted(w)], rtol=1e-4, atol=1e-5, equal_nan=True)
                   for g, w in zip(got, want))
    if got.shape != want.shape:
        return False
    if want.dtype.kind in "OSU" or want.dtype.kind in "iu":
        return np.array_equal(got.astype(want.dtype), want)
    return np.allclose(got, want, rtol=1e-4, atol=1e-5, equal_nan=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("build", nargs="?", default="build")
    p.add_argument("--cases", type=int, default=60)
    a = p.parse_args()
    kiln = os.path.join(a.build, "kiln")
    rng = np.random.default_rng(7)
    makers = [("classifier, 2 classes", lambda: classifier(rng, 2)),
              ("classifier, 2 classes, one class's weights", lambda: classifier(rng, 2, binary_one_class=True)),
              ("classifier, 3 classes", lambda: classifier(rng, 3)),
              ("classifier, 5 classes", lambda: classifier(rng, 5)),
              ("regressor", lambda: regressor(rng)),
              ("LinearClassifier", lambda: linear(rng, "LinearClassifier")),
              ("LinearRegressor", lambda: linear(rng, "LinearRegressor")),
              ("Normalizer, Scaler, ZipMap", lambda: zipmap_chain(rng))]
    failed = total = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in makers:
            bad = 0
            for case in range(a.cases):
                m, features = make()
                path = os.path.join(tmp, "m.onnx")
                onnx.save(m, path)
                x = inputs(rng, int(rng.integers(1, 40)), features)
                want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"X": x})
                got = run_kiln(kiln, path, x, tmp)
                if isinstance(got, str):
                    print(f"FAIL {name} case {case}: {got}")
                    bad += 1
                    continue
                for k, w in enumerate(want):
                    g = decode(got[k], w)
                    if not same(g, w):
                        attrs = {x.name: oh.get_attribute_value(x) for x in m.graph.node[-1].attribute
                                 if x.name in ("post_transform", "base_values", "classlabels_int64s", "norm")}
                        r = next((i for i in range(min(len(g), len(w))) if not same(g[i:i + 1], w[i:i + 1])), 0)
                        print(f"FAIL {name} case {case} output {k} row {r} {attrs}: X {x[r]}\n  kiln {g[r:r + 1]}\n  ORT  {w[r:r + 1]}")
                        bad += 1
                        break
                total += 1
            print(f"{'ok  ' if bad == 0 else 'FAIL'} {name}: {a.cases - bad}/{a.cases} agree with ONNX Runtime")
            failed += bad
    print(f"ml ops: {total - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
