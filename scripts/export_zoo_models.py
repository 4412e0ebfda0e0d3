#!/usr/bin/python3
"""Exports the torchvision networks whose patterns the six benchmark models lack, with random but
fixed weights (seed 0), next to the real models of ../shared/models/fetch_zoo.sh:
  mobilenet_v3_large   Hardswish, Hardsigmoid squeeze-excite
  shufflenet_v2        channel shuffle (Reshape/Transpose), Split, stride-2 depthwise
  resnext50_32x4d      grouped 3x3 convs
  regnet_y_400mf       grouped convs with squeeze-excite, exported at opset 13
  densenet121          Concat of growing feature maps, BatchNorm+ReLU before convs
  convnext_tiny        7x7 depthwise, channels-last LayerNorm (Permute around it), GELU
  lraspp_mobilenet_v3  segmentation at 512x512: bilinear Resize, global pooling branch
  fcn_resnet50_dilated atrous ResNet trunk (dilation 2 and 4) and a bilinear Resize, 512x512
  mobilenet_v2_opset11 an old exporter's spelling (Clip with inputs, Pad/Resize at opset 11)
  convtranspose_unet   a small U-Net decoder: ConvTranspose 2-D and 1-D, bilinear Upsample
  db_text_detector     a DBNet text detector as PaddleOCR builds one (mobilenet_v3_large, DBFPN,
                       DB head), 640x640 with dynamic H and W: nearest Resize + Add top-down,
                       a Concat of four upsampled maps, ConvTranspose + BN + ReLU, Sigmoid
Needs Debian's python3-torch and python3-torchvision; run with /usr/bin/python3.
Usage: export_zoo_models.py OUT_DIR [NAME ...]
"""
import os
import sys

import torch
import torch.nn as nn
import torchvision
from torchvision.models import segmentation


class UNetDecoder(nn.Module):
    """Encoder-decoder with both ConvTranspose kinds and a bilinear Upsample."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1), nn.ReLU(), nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU())
        self.up1 = nn.ConvTranspose2d(64, 32, 4, 2, 1)
        self.up2 = nn.ConvTranspose2d(32, 16, 3, 2, 1, output_padding=1)
        self.seq = nn.ConvTranspose1d(16, 8, 5, 3, 1)
        self.head = nn.Conv2d(16, 2, 1)

    def forward(self, x):
        y = torch.relu(self.up2(torch.relu(self.up1(self.enc(x)))))
        seg = nn.functional.interpolate(self.head(y), scale_factor=2.0, mode="bilinear", align_corners=False)
        line = self.seq(y.mean(dim=2))
        return seg, line


class DBTextDetector(nn.Module):
    """DBNet: backbone maps at strides 4-32, a top-down FPN (1x1 laterals to 96 channels, nearest
    x2 + Add), 3x3 convs to 24 channels upsampled to stride 4 and concatenated, then the
    probability head: 3x3 conv + BN + ReLU, ConvTranspose 2x2/2 + BN + ReLU, ConvTranspose
    2x2/2 to one map, Sigmoid."""

    def __init__(self, inner=96):
        super().__init__()
        self.backbone = torchvision.models.mobilenet_v3_large().features
        self.taps, channels = [3, 6, 12, 16], [24, 40, 112, 960]
        self.lateral = nn.ModuleList([nn.Conv2d(c, inner, 1, bias=False) for c in channels])
        self.smooth = nn.ModuleList([nn.Conv2d(inner, inner // 4, 3, padding=1, bias=False) for _ in channels])
        q = inner // 4
        self.head = nn.Sequential(
            nn.Conv2d(inner, q, 3, padding=1, bias=False), nn.BatchNorm2d(q), nn.ReLU(),
            nn.ConvTranspose2d(q, q, 2, 2), nn.BatchNorm2d(q), nn.ReLU(),
            nn.ConvTranspose2d(q, 1, 2, 2), nn.Sigmoid())
        for m in self.modules():  # statistics a trained model would have, not identities
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)

    def forward(self, x):
        maps = []
        for i, layer in enumerate(self.backbone):
            x = layer(x)
            if i in self.taps:
                maps.append(x)
        c2, c3, c4, c5 = [lat(m) for lat, m in zip(self.lateral, maps)]
        up = lambda t, s: nn.functional.interpolate(t, scale_factor=float(s), mode="nearest")
        o4 = c4 + up(c5, 2)
        o3 = c3 + up(o4, 2)
        o2 = c2 + up(o3, 2)
        p = [up(self.smooth[3](c5), 8), up(self.smooth[2](o4), 4), up(self.smooth[1](o3), 2), self.smooth[0](o2)]
        return self.head(torch.cat(p, 1))


def vision(fn, size=224, **kw):
    return fn(**kw).eval(), size


def segmenter(fn, **kw):
    model = fn(weights=None, weights_backbone=None, **kw).eval()

    class Out(nn.Module):  # the dict output as a tensor
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, x):
            return self.m(x)["out"]

    return Out().eval(), 512


MODELS = {  # name: (builder, opset)
    "mobilenet_v3_large": (lambda: vision(torchvision.models.mobilenet_v3_large), 17),
    "shufflenet_v2": (lambda: vision(torchvision.models.shufflenet_v2_x1_0), 17),
    "resnext50_32x4d": (lambda: vision(torchvision.models.resnext50_32x4d), 17),
    "regnet_y_400mf": (lambda: vision(torchvision.models.regnet_y_400mf), 13),
    "densenet121": (lambda: vision(torchvision.models.densenet121), 17),
    "convnext_tiny": (lambda: vision(torchvision.models.convnext_tiny), 17),
    "lraspp_mobilenet_v3": (lambda: segmenter(segmentation.lraspp_mobilenet_v3_large), 17),
    "fcn_resnet50_dilated": (lambda: segmenter(segmentation.fcn_resnet50, aux_loss=False), 17),
    "mobilenet_v2_opset11": (lambda: vision(torchvision.models.mobilenet_v2), 11),
    "convtranspose_unet": (lambda: (UNetDecoder().eval(), 256), 17),
    "db_text_detector": (lambda: (DBTextDetector().eval(), 640), 11),
}
# Inputs whose H and W are dynamic, as a text detector is shipped (any page size).
DYNAMIC_HW = {"db_text_detector"}


def main():
    out = sys.argv[1]
    names = sys.argv[2:] or list(MODELS)
    os.makedirs(out, exist_ok=True)
    for name in names:
        path = os.path.join(out, name + ".onnx")
        if os.path.exists(path):
            continue
        torch.manual_seed(0)
        build, opset = MODELS[name]
        model, size = build()
        x = torch.randn(1, 3, size, size)
        outputs = ["output", "line"] if name == "convtranspose_unet" else ["output"]
        axes = {0: "batch", 2: "height", 3: "width"} if name in DYNAMIC_HW else {0: "batch"}
        torch.onnx.export(model, (x,), path, input_names=["input"], output_names=outputs,
                          dynamic_axes={"input": axes}, opset_version=opset, do_constant_folding=True)
        print(name, f"opset {opset}", os.path.getsize(path) // (1 << 20), "MiB")


if __name__ == "__main__":
    main()
