// The kernel table a generated runner translation unit provides, and the
// helpers that build it from the kernels' own parameter lists.
#pragma once

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

struct cuda_host_kernel {
  const char* name;       // the name expression, as the launchers spell it
  std::string (*sig)();   // parameter codes, space separated (see cuda_host_param_code)
  void (*call)(void**);   // runs the kernel body for the current thread
};
extern const cuda_host_kernel cuda_host_kernels[];
extern const int cuda_host_kernel_count;

// One code per parameter: C const pointer, P pointer, i4 u4 i8 u8 (integers),
// f4 f8 (floats), sN (a struct of N bytes passed by value).
template <typename T>
std::string cuda_host_param_code() {
  if constexpr (std::is_pointer_v<T>)
    return std::is_const_v<std::remove_pointer_t<T>> ? "C" : "P";
  else if constexpr (std::is_floating_point_v<T>)
    return "f" + std::to_string(sizeof(T));
  else if constexpr (std::is_integral_v<T>)
    return (std::is_signed_v<T> ? "i" : "u") + std::to_string(sizeof(T));
  else
    return "s" + std::to_string(sizeof(T));
}

template <typename... P>
std::string cuda_host_sig(void (*)(P...)) {
  std::string s;
  ((s += (s.empty() ? "" : " ") + cuda_host_param_code<std::remove_cv_t<P>>()), ...);
  return s;
}

template <typename... P, size_t... I>
void cuda_host_call_impl(void (*f)(P...), void** a, std::index_sequence<I...>) {
  f(*static_cast<std::remove_cv_t<P>*>(a[I])...);
}
template <typename... P>
void cuda_host_call(void (*f)(P...), void** a) {
  cuda_host_call_impl(f, a, std::index_sequence_for<P...>{});
}

#define CUDA_HOST_KERNEL(...)                                            \
  cuda_host_kernel {                                                     \
    #__VA_ARGS__, [] { return cuda_host_sig(&__VA_ARGS__); },            \
        [](void** a) { cuda_host_call(&__VA_ARGS__, a); }                \
  }

struct CallArgs {
  const cuda_host_kernel* k;
  void** args;
};
inline void run_kernel(void* p) {
  CallArgs* c = static_cast<CallArgs*>(p);
  c->k->call(c->args);
}

inline std::vector<std::string> sig_tokens(const std::string& sig) {
  std::vector<std::string> out;
  size_t b = 0;
  for (size_t i = 0; i <= sig.size(); ++i)
    if (i == sig.size() || sig[i] == ' ') {
      if (i > b) out.push_back(sig.substr(b, i - b));
      b = i + 1;
    }
  return out;
}
