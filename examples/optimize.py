"""The one-line optimize step: python examples/optimize.py  (model.onnx -> model.opt.onnx)"""
import kiln

kiln.optimize("model.onnx", tune=True).save("model.opt.onnx")
