// kiln._kiln: the C++ core as a Python extension (pybind11). Thin: Model, Session and compare
// as kiln/model.h and kiln/session.h define them, NumPy arrays in and out, and each failing
// Status raised as the Python class of its code (python/kiln/errors.py). The ONNX Runtime-style
// API (InferenceSession, SessionOptions, kiln.optimize) is Python, in python/kiln/.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/bench_inputs.h"
#include "kiln/compare.h"
#include "kiln/cpu.h"
#include "kiln/model.h"
#include "kiln/session.h"

namespace py = pybind11;

namespace kiln::python {
namespace {

// A failing Status on its way to Python: the translator below raises it as the class of its code.
struct StatusError {
  Status status;
};

template <typename T>
T take(Result<T> r) {
  if (!r) throw StatusError{r.status()};
  return std::move(r).value();
}
void check(const Status& st) {
  if (!st.is_ok()) throw StatusError{st};
}

// NumPy's dtype for a kiln element type; none for types NumPy lacks (bfloat16, float8, int4).
std::optional<py::dtype> numpy_dtype(DType t) {
  switch (t) {
    case DType::kFloat32: return py::dtype::of<float>();
    case DType::kFloat64: return py::dtype::of<double>();
    case DType::kFloat16: return py::dtype("float16");
    case DType::kInt8: return py::dtype::of<int8_t>();
    case DType::kInt16: return py::dtype::of<int16_t>();
    case DType::kInt32: return py::dtype::of<int32_t>();
    case DType::kInt64: return py::dtype::of<int64_t>();
    case DType::kUInt8: return py::dtype::of<uint8_t>();
    case DType::kUInt16: return py::dtype::of<uint16_t>();
    case DType::kUInt32: return py::dtype::of<uint32_t>();
    case DType::kUInt64: return py::dtype::of<uint64_t>();
    case DType::kBool: return py::dtype::of<bool>();
    case DType::kComplex64: return py::dtype("complex64");
    case DType::kComplex128: return py::dtype("complex128");
    default: return std::nullopt;
  }
}

// The kiln element type of a NumPy dtype, kString for str/bytes/object arrays, kUndefined else.
DType kiln_dtype(const py::dtype& d) {
  const char kind = d.kind();
  const size_t size = d.itemsize();
  if (kind == 'U' || kind == 'S' || kind == 'O') return DType::kString;
  if (kind == 'b') return DType::kBool;
  if (kind == 'f') return size == 4 ? DType::kFloat32 : size == 8 ? DType::kFloat64 : size == 2 ? DType::kFloat16 : DType::kUndefined;
  if (kind == 'i')
    return size == 1 ? DType::kInt8 : size == 2 ? DType::kInt16 : size == 4 ? DType::kInt32 : size == 8 ? DType::kInt64 : DType::kUndefined;
  if (kind == 'u')
    return size == 1 ? DType::kUInt8 : size == 2 ? DType::kUInt16 : size == 4 ? DType::kUInt32 : size == 8 ? DType::kUInt64 : DType::kUndefined;
  if (kind == 'c') return size == 8 ? DType::kComplex64 : size == 16 ? DType::kComplex128 : DType::kUndefined;
  return DType::kUndefined;
}

// ONNX Runtime's type string: "tensor(float)", "seq(tensor(int64))", ...
std::string onnx_type_string(const IoInfo& io) {
  std::string e;
  switch (io.dtype) {
    case DType::kFloat32: e = "float"; break;
    case DType::kFloat64: e = "double"; break;
    case DType::kUndefined: e = "undefined"; break;
    default: e = dtype_name(io.dtype);
  }
  const std::string tensor = "tensor(" + e + ")";
  switch (io.kind) {
    case Value::Kind::kSequence: return "seq(" + tensor + ")";
    case Value::Kind::kOptional: return "optional(" + tensor + ")";
    case Value::Kind::kMap: return "map(" + tensor + ")";
    default: return tensor;
  }
}

// (name, type, shape, dtype) with dynamic dims as their symbol (None when unnamed); shape None
// when the model gives none.
py::tuple io_tuple(const IoInfo& io) {
  py::object shape = py::none();
  if (io.has_shape) {
    py::list dims;
    for (size_t i = 0; i < io.dims.size(); ++i) {
      if (io.dims[i] >= 0)
        dims.append(io.dims[i]);
      else if (!io.dim_names[i].empty())
        dims.append(io.dim_names[i]);
      else
        dims.append(py::none());
    }
    shape = dims;
  }
  return py::make_tuple(io.name, onnx_type_string(io), shape, dtype_name(io.dtype));
}
py::list io_list(const std::vector<IoInfo>& ios) {
  py::list out;
  for (const IoInfo& io : ios) out.append(io_tuple(io));
  return out;
}

// A NumPy array (or anything np.asarray takes) as an input tensor for `io`. With `may_view`, a
// C-contiguous numeric array whose data is 64-byte aligned (what kiln's kernels assume of every
// tensor) is used in place: the caller's list holds it through the run. Anything else is copied
// into aligned storage.
Tensor tensor_from_python(const py::handle& obj, const IoInfo& io, bool may_view) {
  const std::string what = "input '" + io.name + "'";
  py::array a = py::array::ensure(obj);
  if (!a) throw StatusError{Status::invalid_argument(what + " must be a NumPy array (or convertible to one)")};
  const DType t = kiln_dtype(a.dtype());
  if (t == DType::kUndefined)
    throw StatusError{Status::invalid_argument(what + ": NumPy dtype " + std::string(py::str(a.dtype())) +
                                               " has no ONNX tensor type")};
  if (a.dtype().kind() == 'O' && io.dtype != DType::kString)
    throw StatusError{Status::invalid_argument(what + " must be " + dtype_name(io.dtype) +
                                               ", got an array of Python objects")};
  Shape shape;
  for (py::ssize_t i = 0; i < a.ndim(); ++i) shape.push_back(a.shape(i));
  if (t == DType::kString) {
    Tensor s = take(Tensor::make(DType::kString, shape));
    py::list items = py::list(a.attr("ravel")().attr("tolist")());
    std::string* out = s.data<std::string>();
    for (size_t i = 0; i < items.size(); ++i) {
      py::handle item = items[i];
      if (py::isinstance<py::bytes>(item))
        out[i] = item.cast<std::string>();
      else if (py::isinstance<py::str>(item))
        out[i] = item.cast<std::string>();
      else
        throw StatusError{Status::invalid_argument(what + ": a string tensor holds only str or bytes")};
    }
    return s;
  }
  // In place only when `obj` is the array itself (the caller's list keeps it alive through the
  // run), not a temporary that ensure() converted it into.
  const bool contiguous = (a.flags() & py::array::c_style) != 0;
  const bool aligned = reinterpret_cast<uintptr_t>(a.data()) % 64 == 0;
  if (may_view && a.ptr() == obj.ptr() && contiguous && aligned && a.dtype().byteorder() != '>')
    return Tensor::wrap(t, shape, const_cast<void*>(a.data()), nullptr);
  Tensor copy = take(Tensor::make_for_overwrite(t, shape));
  py::array c = py::array::ensure(a, py::array::c_style | py::array::forcecast);
  if (copy.nbytes()) std::memcpy(copy.raw_data(), c.data(), copy.nbytes());
  return copy;
}

// An output tensor as a NumPy array that owns it (no copy), unless it shares the storage of a
// caller's input (a tensor with no owner of its own): then a copy.
py::object tensor_to_python(const Tensor& t, const std::string& name) {
  py::list shape_list;
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  if (t.dtype() == DType::kString) {
    py::list items;
    for (int64_t i = 0; i < t.numel(); ++i) items.append(py::str(t.data<std::string>()[i]));
    return py::module_::import("numpy").attr("array")(items, "object").attr("reshape")(py::tuple(py::cast(shape)));
  }
  const auto dt = numpy_dtype(t.dtype());
  if (!dt)
    throw StatusError{Status::not_implemented("output '" + name + "' is " + dtype_name(t.dtype()) +
                                              ", which NumPy has no type for")};
  if (!t.owner() || !t.raw_data()) {
    py::array a(*dt, shape);
    if (t.nbytes()) std::memcpy(a.mutable_data(), t.raw_data(), t.nbytes());
    return a;
  }
  auto* keep = new std::shared_ptr<void>(t.owner());
  py::capsule owner(keep, [](void* p) { delete static_cast<std::shared_ptr<void>*>(p); });
  return py::array(*dt, shape, t.raw_data(), owner);
}

py::object value_to_python(const Value& v, const std::string& name) {
  switch (v.kind) {
    case Value::Kind::kTensor: return tensor_to_python(v.tensor, name);
    case Value::Kind::kOptional:
      if (!v.has_element) return py::none();
      if (v.element_kind == Value::Kind::kTensor) return tensor_to_python(v.tensor, name);
      [[fallthrough]];
    case Value::Kind::kSequence: {
      py::list items;
      for (size_t i = 0; i < v.sequence.size(); ++i) {
        if (v.element_kind == Value::Kind::kMap) {  // ZipMap: one dict per row
          py::dict d;
          py::object keys = tensor_to_python(v.sequence_keys[i], name);
          py::object values = tensor_to_python(v.sequence[i], name);
          for (py::ssize_t k = 0; k < py::len(keys); ++k) d[keys[py::int_(k)]] = values[py::int_(k)];
          items.append(d);
        } else {
          items.append(tensor_to_python(v.sequence[i], name));
        }
      }
      return items;
    }
    default: return py::none();
  }
}

// Inputs in the order of `ios`: values converted while the GIL is held; the arrays stay
// referenced by the caller's list for the whole run.
std::vector<Value> inputs_from_python(const py::list& arrays, const std::vector<IoInfo>& ios) {
  if (arrays.size() != ios.size())
    throw StatusError{Status::invalid_argument("the model takes " + std::to_string(ios.size()) +
                                               " inputs, got " + std::to_string(arrays.size()))};
  std::vector<Value> values;
  values.reserve(ios.size());
  for (size_t i = 0; i < ios.size(); ++i) {
    if (ios[i].kind == Value::Kind::kSequence) {
      Value v;
      v.kind = Value::Kind::kSequence;
      v.sequence_dtype = ios[i].dtype;
      for (py::handle item : py::list(arrays[i])) v.sequence.push_back(tensor_from_python(item, ios[i], false));
      values.push_back(std::move(v));
    } else {
      values.push_back(Value::of(tensor_from_python(arrays[i], ios[i], true)));
    }
  }
  return values;
}

py::dict optimize_report(const OptimizeReport& r) {
  py::list passes;
  for (const PassReport& p : r.passes)
    passes.append(py::dict(py::arg("name") = p.name, py::arg("rewrites") = p.rewrites,
                           py::arg("nodes_before") = p.nodes_before,
                           py::arg("nodes_after") = p.nodes_after, py::arg("ms") = p.ms));
  return py::dict(py::arg("passes") = passes, py::arg("nodes_before") = r.nodes_before,
                  py::arg("nodes_after") = r.nodes_after);
}

py::dict tune_report(const TuneReport& r) {
  py::list nodes;
  for (const NodeTuning& n : r.nodes) {
    py::list cands;
    for (const CandidateTiming& c : n.candidates)
      cands.append(py::dict(py::arg("backend") = c.backend, py::arg("median_us") = c.median_us,
                            py::arg("rejected") = c.rejected));
    nodes.append(py::dict(py::arg("node") = n.key, py::arg("op_type") = n.op_type,
                          py::arg("shapes") = n.shapes, py::arg("candidates") = cands,
                          py::arg("winner") = n.winner, py::arg("cached") = n.cached,
                          py::arg("over_budget") = n.over_budget));
  }
  py::list models;
  for (const ModelTiming& t : r.model_timings)
    models.append(py::dict(py::arg("config") = t.config, py::arg("ms") = t.ms,
                           py::arg("vs_kiln") = t.vs_kiln, py::arg("faster_rounds") = t.faster_rounds,
                           py::arg("rounds") = t.rounds));
  return py::dict(py::arg("nodes") = nodes, py::arg("choices") = r.choices,
                  py::arg("model_timings") = models, py::arg("kept") = r.kept,
                  py::arg("timed") = r.timed, py::arg("cache_hits") = r.cache_hits,
                  py::arg("seconds") = r.seconds);
}

py::dict diff_dict(const TensorDiff& d) {
  return py::dict(py::arg("name") = d.name, py::arg("name_b") = d.name_b,
                  py::arg("producer_a") = d.producer_a, py::arg("producer_b") = d.producer_b,
                  py::arg("max_abs") = d.max_abs, py::arg("max_rel") = d.max_rel,
                  py::arg("mismatches") = d.mismatches, py::arg("numel") = d.numel,
                  py::arg("ok") = d.ok);
}

// A Session and the lock that lets Python threads share it: kiln::Session runs one request at a
// time, so concurrent run() calls queue here (with the GIL released) instead of racing.
struct PySession {
  std::unique_ptr<Session> session;
  std::mutex mutex;

  // The outputs of one run on `arrays`, timing each node into *profile when it is not null.
  py::list execute(const py::list& arrays, RunProfile* profile) {
    std::vector<Value> inputs = inputs_from_python(arrays, session->inputs());
    Result<std::vector<Value>> outs = Status::error("");
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mutex);
      outs = profile ? session->run_profiled(inputs, profile) : session->run(inputs);
    }
    std::vector<Value> values = take(std::move(outs));
    py::list result;
    for (size_t i = 0; i < values.size(); ++i)
      result.append(value_to_python(values[i], session->outputs()[i].name));
    return result;
  }

  py::list run(const py::list& arrays) { return execute(arrays, nullptr); }

  py::tuple run_profiled(const py::list& arrays) {
    RunProfile profile;
    py::list result = execute(arrays, &profile);
    py::list nodes;
    for (const NodeTiming& n : profile.nodes)
      nodes.append(py::dict(py::arg("node") = n.node, py::arg("op_type") = n.op_type,
                            py::arg("domain") = n.domain, py::arg("start_us") = n.start_us,
                            py::arg("dur_us") = n.dur_us, py::arg("flops") = n.flops,
                            py::arg("input_shapes") = n.input_shapes));
    return py::make_tuple(result, nodes, profile.wall_us);
  }
};

SessionOptions session_options(int threads, int level, const std::string& backend, bool arena) {
  SessionOptions so;
  so.threads = threads;
  so.optimize_level = level;
  so.backend = backend;
  so.memory_arena = arena;
  return so;
}

}  // namespace
}  // namespace kiln::python

PYBIND11_MODULE(_kiln, m) {
  using namespace kiln;
  using namespace kiln::python;
  m.doc() = "kiln's C++ core; use the `kiln` package, not this module";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      py::object errors = py::module_::import("kiln.errors");
      py::object cls = errors.attr("error_class")(status_code_name(e.status.code()));
      PyErr_SetObject(cls.ptr(), py::str(e.status.message()).ptr());
    }
  });

  py::class_<Model>(m, "Model")
      .def_static("load", [](const std::string& path) { return take(Model::load(path)); })
      .def_static("load_bytes", [](const py::bytes& b, const std::string& base_dir) {
        std::string_view v = b;
        return take(Model::load_bytes(v, base_dir));
      }, py::arg("data"), py::arg("base_dir") = "")
      .def("save", [](const Model& model, const std::string& path, const std::string& external,
                      const std::string& location) {
        SaveOptions o;
        if (external == "always") o.external_data = SaveOptions::ExternalData::kAlways;
        else if (external == "never") o.external_data = SaveOptions::ExternalData::kNever;
        else if (external != "auto")
          throw StatusError{Status::invalid_argument("external_data must be 'auto', 'always' or 'never'")};
        o.location = location;
        SaveReport report;
        check(model.save(path, o, &report));
        return report.data_path;
      }, py::arg("path"), py::arg("external_data") = "auto", py::arg("location") = "")
      .def("to_bytes", [](const Model& model) { return py::bytes(take(model.to_bytes())); })
      .def("optimize", [](Model& model, int level, bool portable, const std::vector<std::string>& disable,
                          const std::map<std::string, int64_t>& fixed_dims) {
        OptimizeOptions o;
        o.level = level;
        o.portable = portable;
        o.disabled.insert(disable.begin(), disable.end());
        o.fixed_dims = fixed_dims;
        OptimizeReport r;
        {
          py::gil_scoped_release release;
          r = take(model.optimize(o));
        }
        return optimize_report(r);
      }, py::arg("level") = 3, py::arg("portable") = false, py::arg("disable") = std::vector<std::string>{},
         py::arg("fixed_dims") = std::map<std::string, int64_t>{})
      .def("tune", [](Model& model, const py::list& arrays, int threads, const std::string& cache_path,
                      double node_budget_ms, double total_budget_s) {
        std::vector<Value> inputs = inputs_from_python(arrays, model.inputs());
        TuneOptions o;
        o.threads = threads;
        o.cache_path = cache_path;
        o.node_budget_ms = node_budget_ms;
        o.total_budget_s = total_budget_s;
        TuneReport r;
        {
          py::gil_scoped_release release;
          r = take(model.tune(inputs, o));
        }
        return tune_report(r);
      }, py::arg("inputs"), py::arg("threads") = 0, py::arg("cache_path") = "",
         py::arg("node_budget_ms") = 400.0, py::arg("total_budget_s") = 60.0)
      .def("quantize", [](Model& model, const py::function& next, const py::object& held_out, const std::string& method,
                          double percentile, bool per_channel, bool signed_activations,
                          const std::vector<std::string>& keep_float, double min_cosine, int max_fallbacks,
                          bool dynamic, bool portable, const std::string& weight_bits, const std::string& precision,
                          int weight_only_bits, int64_t block_size, int hold_out_every, double min_top1,
                          const py::object& metric, double min_metric, bool check_speed) {
        QuantizeOptions o;
        o.check_speed = check_speed;
        o.hold_out_every = hold_out_every;
        o.min_top1 = min_top1;
        o.min_metric = min_metric;
        if (!metric.is_none()) {
          // metric(float_outputs, quantized_outputs): lists (samples) of lists (outputs) of arrays.
          o.metric = [metric](const std::vector<std::vector<Tensor>>& a,
                              const std::vector<std::vector<Tensor>>& b) -> Result<double> {
            py::gil_scoped_acquire gil;
            auto lists = [](const std::vector<std::vector<Tensor>>& samples) {
              py::list out;
              for (const auto& sample : samples) {
                py::list outputs;
                for (const Tensor& t : sample) outputs.append(tensor_to_python(t, "output"));
                out.append(outputs);
              }
              return out;
            };
            try {
              return metric(lists(a), lists(b)).cast<double>();
            } catch (const py::error_already_set& e) {
              return Status::invalid_argument(std::string("the quantization metric failed: ") + e.what());
            } catch (const py::cast_error& e) {
              return Status::invalid_argument(std::string("the quantization metric must return a number: ") + e.what());
            }
          };
        }
        o.weight_only_bits = weight_only_bits;
        o.block_size = block_size;
        if (precision == "int8") o.precision = QuantizePrecision::kInt8;
        else if (precision == "fp16") o.precision = QuantizePrecision::kFloat16;
        else if (precision == "bf16") o.precision = QuantizePrecision::kBFloat16;
        else throw StatusError{Status::invalid_argument("precision must be int8, fp16 or bf16")};
        if (method == "auto") o.method = CalibrationMethod::kAuto;
        else if (method == "minmax") o.method = CalibrationMethod::kMinMax;
        else if (method == "percentile") o.method = CalibrationMethod::kPercentile;
        else if (method == "entropy") o.method = CalibrationMethod::kEntropy;
        else if (method == "mse") o.method = CalibrationMethod::kMse;
        else throw StatusError{Status::invalid_argument("method must be auto, minmax, percentile, entropy or mse")};
        o.percentile = percentile;
        o.per_channel = per_channel;
        o.signed_activations = signed_activations;
        o.keep_float = keep_float;
        o.min_cosine = min_cosine;
        o.max_fallbacks = max_fallbacks;
        o.dynamic = dynamic;
        o.portable = portable;
        apply_weight_bits(o, weight_bits);  // after dynamic, portable and weight_only_bits
        const std::vector<IoInfo> ios = model.inputs();
        // `next` returns a list of arrays in input order, or None; samples are copied (kept).
        auto reader_of = [&](const py::object& source) -> CalibrationReader {
          return [&ios, source]() -> Result<std::optional<std::vector<Tensor>>> {
          py::gil_scoped_acquire gil;
          try {
            py::object sample = source();
            if (sample.is_none()) return std::optional<std::vector<Tensor>>();
            py::list arrays(sample);
            if (arrays.size() != ios.size())
              return Status::invalid_argument("a calibration sample has " + std::to_string(arrays.size()) +
                                              " arrays; the model takes " + std::to_string(ios.size()) + " inputs");
            std::vector<Tensor> tensors;
            for (size_t i = 0; i < ios.size(); ++i) tensors.push_back(tensor_from_python(arrays[i], ios[i], false));
            return std::optional<std::vector<Tensor>>(std::move(tensors));
          } catch (const StatusError& e) {
            return e.status;
          } catch (const py::error_already_set& e) {
            return Status::invalid_argument(std::string("reading calibration data: ") + e.what());
          }
          };
        };
        const CalibrationReader reader = reader_of(next);
        const CalibrationReader held = held_out.is_none() ? CalibrationReader() : reader_of(held_out);
        QuantizeReport r;
        {
          py::gil_scoped_release release;
          r = take(model.quantize(reader, o, held));
        }
        auto errors = [](const std::vector<TensorError>& list) {
          py::list out;
          for (const TensorError& e : list)
            out.append(py::dict(py::arg("tensor") = e.tensor, py::arg("sqnr_db") = e.sqnr_db, py::arg("cosine") = e.cosine,
                                py::arg("feature_cosine") = e.feature_cosine));
          return out;
        };
        py::list speeds;
        for (const NodeSpeed& n : r.speeds)
          speeds.append(py::dict(py::arg("node") = n.node, py::arg("int8_ops") = n.int8_ops,
                                 py::arg("int8_us") = n.int8_us, py::arg("conversion_us") = n.conversion_us,
                                 py::arg("float_us") = n.float_us));
        return py::dict(py::arg("samples") = r.samples, py::arg("quantized_nodes") = r.quantized_nodes,
                        py::arg("quantized_tensors") = r.quantized_tensors, py::arg("removed_clamps") = r.removed_clamps,
                        py::arg("opset_before") = r.opset_before, py::arg("opset_after") = r.opset_after,
                        py::arg("kept_float") = r.kept_float, py::arg("dynamic_nodes") = r.dynamic_nodes,
                        py::arg("recurrent_nodes") = r.recurrent_nodes,
                        py::arg("activations_in_float") = r.activations_in_float,
                        py::arg("activations_in_tables") = r.activations_in_tables,
                        py::arg("layers") = errors(r.layers), py::arg("speeds") = speeds,
                        py::arg("outputs") = errors(r.outputs), py::arg("measured_on_held_out") = r.measured_on_held_out,
                        py::arg("held_out_of_calibration") = r.held_out_of_calibration,
                        py::arg("calibration_method") = r.calibration_method,
                        py::arg("calibration_trials") = r.calibration_trials,
                        py::arg("top1") = r.top1 ? py::object(py::float_(*r.top1)) : py::object(py::none()),
                        py::arg("latency_ms") = r.latency_ms, py::arg("latency_all_8bit_ms") = r.latency_all_8bit_ms,
                        py::arg("seven_bit_weights_missed") = r.seven_bit_weights_missed,
                        py::arg("metric") = r.metric ? py::object(py::float_(*r.metric)) : py::object(py::none()),
                        py::arg("weight_bytes_before") = r.weight_bytes_before,
                        py::arg("weight_bytes_after") = r.weight_bytes_after);
      }, py::arg("next"), py::arg("held_out") = py::none(), py::arg("method") = "auto", py::arg("percentile") = 99.999,
         py::arg("per_channel") = true, py::arg("signed_activations") = false,
         py::arg("keep_float") = std::vector<std::string>{}, py::arg("min_cosine") = 0.99, py::arg("max_fallbacks") = 16,
         py::arg("dynamic") = false, py::arg("portable") = false, py::arg("weight_bits") = "8",
         py::arg("precision") = "int8", py::arg("weight_only_bits") = 0, py::arg("block_size") = 32,
         py::arg("hold_out_every") = 4, py::arg("min_top1") = 0.0, py::arg("metric") = py::none(),
         py::arg("min_metric") = 0.0, py::arg("check_speed") = true)
      .def("copy", [](const Model& model) { return Model(model); })
      .def("clear_backend_choices", &Model::clear_backend_choices)
      .def("summary", [](const Model& model, int64_t batch, int64_t seq) {
        const ModelSummary s = model.summary(batch, seq);
        return py::dict(py::arg("nodes") = s.nodes, py::arg("ops") = s.ops,
                        py::arg("parameters") = s.parameters, py::arg("parameter_bytes") = s.parameter_bytes,
                        py::arg("flops") = s.flops >= 0 ? py::object(py::float_(s.flops)) : py::object(py::none()),
                        py::arg("nodes_without_cost") = s.nodes_without_cost,
                        py::arg("shape_error") = s.shape_error);
      }, py::arg("batch") = 1, py::arg("seq") = 128)
      .def_property_readonly("inputs", [](const Model& model) { return io_list(model.inputs()); })
      .def_property_readonly("outputs", [](const Model& model) { return io_list(model.outputs()); })
      .def_property_readonly("metadata", &Model::metadata)
      .def_property_readonly("producer_name", &Model::producer_name)
      .def_property_readonly("producer_version", &Model::producer_version)
      .def_property_readonly("graph_name", &Model::graph_name)
      .def_property_readonly("domain", &Model::domain)
      .def_property_readonly("description", &Model::description)
      .def_property_readonly("model_version", &Model::model_version)
      .def_property_readonly("opsets", &Model::opsets)
      .def_property_readonly("optimized", &Model::optimized);

  py::class_<PySession>(m, "Session")
      .def_static("load", [](const std::string& path, int threads, int level, const std::string& backend,
                             bool arena) {
        auto s = std::make_unique<PySession>();
        const SessionOptions so = session_options(threads, level, backend, arena);
        {
          py::gil_scoped_release release;
          s->session = take(Session::load(path, so));
        }
        return s;
      }, py::arg("path"), py::arg("threads") = 0, py::arg("level") = 3, py::arg("backend") = "kiln",
         py::arg("arena") = true)
      .def_static("create", [](const Model& model, int threads, int level, const std::string& backend,
                               bool arena) {
        // Optimized first at `level` unless kiln optimized it: as Session::load treats a file.
        Model copy = model;
        take(copy.optimize_unless_saved(level));
        auto s = std::make_unique<PySession>();
        s->session = take(Session::create(copy, session_options(threads, level, backend, arena)));
        return s;
      }, py::arg("model"), py::arg("threads") = 0, py::arg("level") = 3, py::arg("backend") = "kiln",
         py::arg("arena") = true)
      .def("run", &PySession::run)
      .def("run_profiled", &PySession::run_profiled)
      .def_property_readonly("inputs", [](const PySession& s) { return io_list(s.session->inputs()); })
      .def_property_readonly("outputs", [](const PySession& s) { return io_list(s.session->outputs()); })
      .def_property_readonly("threads", [](const PySession& s) { return s.session->threads(); })
      .def("node_backends", [](const PySession& s) { return s.session->node_backends(); });

  m.def("active_isa", [] { return std::string(isa_name(active_isa())); },
        "The ISA level kiln's kernels use: avx2, avx_vnni, avx512 or avx512_vnni");
  m.def("has_vnni", [] { return has_vnni(); },
        "Whether that level multiplies u8 by s8 in one exact instruction (AVX-VNNI or AVX512-VNNI)");
  m.def("compare", [](const Model& a, const Model& b, const py::list& arrays, double rtol, double atol,
                      bool per_layer, int threads) {
    std::vector<Value> inputs = inputs_from_python(arrays, a.inputs());
    CompareOptions o;
    o.rtol = rtol, o.atol = atol, o.per_layer = per_layer;
    CompareReport r;
    {
      py::gil_scoped_release release;
      r = take(compare_models(a.ir(), b.ir(), inputs, o, threads));
    }
    py::list outputs, layers;
    for (const TensorDiff& d : r.outputs) outputs.append(diff_dict(d));
    for (const TensorDiff& d : r.layers) layers.append(diff_dict(d));
    return py::dict(py::arg("ok") = r.ok, py::arg("outputs") = outputs, py::arg("layers") = layers,
                    py::arg("first_divergence") =
                        r.first_divergence ? py::object(diff_dict(*r.first_divergence)) : py::none());
  }, py::arg("a"), py::arg("b"), py::arg("inputs"), py::arg("rtol") = 1e-3, py::arg("atol") = 1e-4,
     py::arg("per_layer") = false, py::arg("threads") = 0);

  m.def("bench_inputs", [](const Model& model, int64_t batch, int64_t seq,
                           const std::vector<std::string>& shapes) {
    const std::vector<IoInfo> ios = model.inputs();
    std::vector<Value> values = take(make_bench_inputs(ios, InputShapes{batch, seq, shapes}));
    py::list out;
    for (size_t i = 0; i < values.size(); ++i) out.append(value_to_python(values[i], ios[i].name));
    return out;
  }, py::arg("model"), py::arg("batch") = 1, py::arg("seq") = 128,
     py::arg("shapes") = std::vector<std::string>{});

  m.attr("__version__") = KILN_VERSION;
}
