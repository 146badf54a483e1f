// humming_aot._eager: QuantLinear's eager fast path, the GEMM op's implementation called without the
// torch dispatcher (whose boxing of twelve arguments costs several microseconds per call). This
// module takes at::Tensor through torch's own pybind11 casters, so unlike the rest of the package
// it is tied to the torch it was built with: humming_aot._ext imports it only when the running
// torch is that one, and every other torch takes torch.ops.humming.gemm. The implementation is
// _torch_ops.so's (humming_gemm_direct), so both paths share its caches and stream-K scratch.
#include <ATen/ATen.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/inductor/aoti_torch/utils.h>
#include <torch/csrc/utils/pybind.h> // pybind11 casters for at::Tensor

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace py = pybind11;

extern "C" int humming_gemm_direct(AtenTensorHandle a, AtenTensorHandle codes, AtenTensorHandle scales,
                                   AtenTensorHandle zeros, AtenTensorHandle global_scale, AtenTensorHandle a_scales,
                                   AtenTensorHandle bias, const char *fmt, size_t fmt_size, int64_t layout, int64_t n,
                                   int64_t k, const char *instance, size_t instance_size, AtenTensorHandle *out,
                                   char *error, size_t error_size);

extern "C" int humming_quantize_gemm_direct(AtenTensorHandle a, AtenTensorHandle codes, AtenTensorHandle scales,
                                            AtenTensorHandle zeros, AtenTensorHandle global_scale,
                                            AtenTensorHandle bias, const char *act, size_t act_size, const char *fmt,
                                            size_t fmt_size, int64_t layout, int64_t n, int64_t k, const char *instance,
                                            size_t instance_size, AtenTensorHandle *out, char *error,
                                            size_t error_size);

namespace {

// A handle that borrows the caller's at::Tensor for the duration of one call (an AtenTensorHandle
// is a pointer to one); null for an absent optional. humming_gemm_direct takes its own reference.
AtenTensorHandle borrow(const at::Tensor &t) {
  return torch::aot_inductor::tensor_pointer_to_tensor_handle(const_cast<at::Tensor *>(&t));
}
AtenTensorHandle borrow(const std::optional<at::Tensor> &t) { return t.has_value() ? borrow(*t) : nullptr; }

// The result of a direct call: the output handle `out` as a tensor the caller owns (rc 0), or the
// call's error raised as ValueError (rc 1, bad arguments) or RuntimeError.
at::Tensor owned(int rc, AtenTensorHandle out, const char *error) {
  if (rc == 1) throw py::value_error(error);
  if (rc != 0) throw std::runtime_error(error);
  at::Tensor result = *torch::aot_inductor::tensor_handle_to_tensor_pointer(out);
  aoti_torch_delete_tensor_object(out);
  return result;
}

at::Tensor gemm_eager(const at::Tensor &a, const at::Tensor &codes, const std::optional<at::Tensor> &scales,
                      const std::optional<at::Tensor> &zeros, const std::optional<at::Tensor> &global_scale,
                      const std::optional<at::Tensor> &a_scales, const std::optional<at::Tensor> &bias,
                      const std::string &fmt, int64_t layout, int64_t n, int64_t k, const std::string &instance) {
  AtenTensorHandle out = nullptr;
  char error[2048];
  const int rc = humming_gemm_direct(borrow(a), borrow(codes), borrow(scales), borrow(zeros), borrow(global_scale),
                                     borrow(a_scales), borrow(bias), fmt.data(), fmt.size(), layout, n, k,
                                     instance.data(), instance.size(), &out, error, sizeof(error));
  return owned(rc, out, error);
}

// QuantLinear's eager path for quantized activations: quantize_act and the GEMM in one call
// (humming_quantize_gemm_direct). `a` holds the 16-bit activations, `act` the activation format.
at::Tensor quantize_gemm_eager(const at::Tensor &a, const at::Tensor &codes, const std::optional<at::Tensor> &scales,
                               const std::optional<at::Tensor> &zeros, const std::optional<at::Tensor> &global_scale,
                               const std::optional<at::Tensor> &bias, const std::string &act, const std::string &fmt,
                               int64_t layout, int64_t n, int64_t k, const std::string &instance) {
  AtenTensorHandle out = nullptr;
  char error[2048];
  const int rc = humming_quantize_gemm_direct(
      borrow(a), borrow(codes), borrow(scales), borrow(zeros), borrow(global_scale), borrow(bias), act.data(),
      act.size(), fmt.data(), fmt.size(), layout, n, k, instance.data(), instance.size(), &out, error, sizeof(error));
  return owned(rc, out, error);
}

} // namespace

PYBIND11_MODULE(_eager, m) {
  m.doc() = "humming_aot._eager: torch.ops.humming.gemm's implementation (and quantize_act + gemm) without the "
            "dispatcher (this torch only)";
  m.def("gemm_eager", &gemm_eager, py::arg("a"), py::arg("codes"), py::arg("scales"), py::arg("zeros"),
        py::arg("global_scale"), py::arg("a_scales"), py::arg("bias"), py::arg("fmt"), py::arg("layout"), py::arg("n"),
        py::arg("k"), py::arg("instance") = "");
  m.def("quantize_gemm_eager", &quantize_gemm_eager, py::arg("a"), py::arg("codes"), py::arg("scales"),
        py::arg("zeros"), py::arg("global_scale"), py::arg("bias"), py::arg("act"), py::arg("fmt"), py::arg("layout"),
        py::arg("n"), py::arg("k"), py::arg("instance") = "");
}
