#!/usr/bin/env python3
"""Nodes before -> after, the passes that fired and the ops left, for each benchmark model, from
`kiln optimize -v` and `kiln info` (a markdown table row per model).

    python3 scripts/fusion_table.py [KILN (build/kiln)] [LEVEL (2)]
"""
import subprocess, sys, os, re
kiln = sys.argv[1] if len(sys.argv) > 1 else "build/kiln"
level = sys.argv[2] if len(sys.argv) > 2 else "2"
M = os.path.expanduser("~/.cache/kiln-bench/models")
fusions = ["skip-layer-norm", "gelu", "bias-gelu", "embed-layer-norm", "attention-fusion", "transpose-cancel",
           "squeeze-excite", "conv-epilogue", "gemm-epilogue", "mlp-fusion", "elementwise-fusion", "nchwc-layout",
           "hard-sigmoid-canonical", "gemm-to-matmul", "fold-batchnorm", "layer-norm"]
for m in ["resnet50", "mobilenet_v2", "efficientnet_b0", "vit_b_16", "bert_base", "bert_tiny"]:
    out = f"/tmp/{m}.O{level}.onnx"
    r = subprocess.run([kiln, "optimize", f"{M}/{m}.onnx", "-o", out, "-v", "-O", level], capture_output=True, text=True)
    rows = {}
    for line in r.stdout.splitlines():
        p = line.split()
        if len(p) >= 5 and p[1].isdigit() and "(clean-up)" not in line:
            rows[p[0]] = int(p[1])
    nodes = re.search(r"nodes (\d+) -> (\d+)", r.stdout)
    info = subprocess.run([kiln, "info", out], capture_output=True, text=True).stdout
    ops = info.split("operators:")[1].split()
    hist = dict(zip(ops[0::2], ops[1::2]))
    fired = ", ".join(f"{k} {rows[k]}" for k in fusions if rows.get(k))
    print(f"| {m} | {nodes.group(1)} -> {nodes.group(2)} | {fired} | " + " ".join(f"{k}:{v}" for k, v in sorted(hist.items())) + " |")
