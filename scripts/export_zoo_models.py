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
}


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
        torch.onnx.export(model, (x,), path, input_names=["input"], output_names=outputs,
                          dynamic_axes={"input": {0: "batch"}}, opset_version=opset, do_constant_folding=True)
        print(name, f"opset {opset}", os.path.getsize(path) // (1 << 20), "MiB")


if __name__ == "__main__":
    main()
