/* backend_cuda.h - the CUDA backend (backend.h), and what it offers beyond
 * the common function table.
 *
 * The forward pass is backend_cpu.c's, on the GPU: kernels of their own
 * (kernels/ck_cuda_*.cu) for the element-wise and attention work and cuBLAS
 * for the projections. Weights are uploaded once at creation, as f32 when
 * every weight matrix of the model is f32 (so a small f32 model's greedy
 * tokens match the CPU's) and as f16 otherwise (f16/bf16 are converted,
 * quantized types stay as they are). The environment variable
 * CONFKV_CUDA_WEIGHTS=f32|f16 overrides that choice (read at creation only).
 *
 * Quantized weights (every quantized GGUF type confkv reads but MXFP4: Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS) stay in their file
 * bytes in device memory and are multiplied by a dequantizing GEMV for
 * batches of up to 8 tokens, by slices expanded to f16 and cuBLAS above;
 * only a quantized token embedding is expanded (to f16) at upload.
 * CONFKV_CUDA_QUANT=expand expands every quantized tensor at upload instead.
 *
 * Memory: everything (weights, the KV pool in f32 as kv.h lays it out, the
 * int8 pool of n_kv8_blocks blocks in kvq.h's layout, activations for
 * max_batch_tokens, the logits of max_batch_tokens rows, the batch arrays
 * and block tables, a cuBLAS workspace) is allocated with plain
 * cudaMalloc/cudaHostAlloc in be_cuda_new; forward() allocates nothing.
 * memory_bytes() counts device bytes only.
 *
 * All the optional entries of be_ops are there (int8 hot blocks: kv_compress
 * and kv_expand produce kvq_quantize's and kvq_dequantize's results, byte
 * for byte).
 *
 * Errors: be_cuda_new fills err; at run time a CUDA or cuBLAS failure is
 * logged to stderr ("confkv cuda: ...") and returned as CK_EBACKEND. After
 * a fault inside a kernel the device context is lost: every later call
 * fails too, and the backend should be destroyed.
 *
 * Linking: this is the shared object libconfkv_cuda.so, which backend.c
 * opens on demand (be_new "cuda" or "auto"); programs link it only to call
 * the be_cuda_* below directly (tests/gpu).
 *
 * Threading: as backend.h, one thread at a time; entry points set the device
 * the backend was created on, so that thread may change. */
#ifndef CK_BACKEND_CUDA_H
#define CK_BACKEND_CUDA_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "backend.h"

/* The entry points libconfkv_cuda.so exports; everything else in it is
 * hidden (kernels/CMakeLists.txt), so its C++ and CUDA internals cannot
 * clash with anything of the process that dlopen()s it. */
#if defined(__GNUC__)
#define CK_CUDA_API __attribute__((visibility("default")))
#else
#define CK_CUDA_API
#endif

/* 1 when the CUDA runtime sees at least one device, else 0 (also when there
 * is no driver at all: never crashes, prints nothing). */
CK_CUDA_API int be_cuda_available(void);

/* Create the CUDA backend on the current device (device 0 unless the
 * calling thread chose another). Needs compute capability 9.0 or later (the
 * kernels are built for sm_90 with PTX) and head_dim <= 256. Returns 0 and
 * sets *out; CK_EINVAL for bad options, CK_EUNSUPPORTED for a model or
 * device it cannot run (a weight of a type with no CUDA kernel, such as
 * mxfp4, is refused by tensor and type name before the device is touched),
 * CK_EBACKEND for a CUDA/cuBLAS failure (out of
 * device memory included), each with a sentence in err. The model must
 * outlive the backend. */
CK_CUDA_API int be_cuda_new(const model *m, const be_options *o, backend **out, char *err, size_t errlen);

/* 1 if b was made by be_cuda_new (be_cuda_confidence refuses any other
 * backend with CK_EINVAL). */
CK_CUDA_API int be_cuda_is(const backend *b);

/* Confidence of a logits row, computed on the device (online softmax); the
 * first three fields are samp.h's samp_conf. */
typedef struct be_cuda_conf {
    float entropy;  /* of the softmax, in nats */
    float gap;      /* p_max - p_second */
    float pmax;     /* largest probability */
    int32_t argmax; /* its token (lowest id on a tie) */
} be_cuda_conf;

/* Confidence of rows [0, n_rows) of the logits the last successful
 * forward() produced (they stay on the device until the next forward).
 * n_rows <= that forward's n_out. Returns 0, CK_EINVAL or CK_EBACKEND. */
CK_CUDA_API int be_cuda_confidence(backend *b, int n_rows, be_cuda_conf *out);

/* Page-locked host memory (cudaHostAlloc), the fastest source and
 * destination for kv_read/kv_write and kv8_read/kv8_write. Returns 0
 * and sets *out, or CK_EBACKEND. Free with be_cuda_host_free (NULL is a
 * no-op). */
CK_CUDA_API int be_cuda_host_alloc(size_t bytes, void **out);
CK_CUDA_API void be_cuda_host_free(void *p);

/* For tests (tests/gpu/test_gpu_quant.c): the backend's product path on one
 * quantized matrix. w: N rows of K elements of ggml type `type` (a
 * quantized type, host bytes as a file stores them); x: M rows of K host
 * floats, rounded to f16 first when x_f16 (the product inputs of a model
 * with f16 or quantized weights are f16); y: M rows of N floats,
 * y = x . w^T, computed as forward() would (the GEMV for M <= 8, f16 or f32
 * slices and cuBLAS above). deq, unless NULL: the N x K weights dequantized
 * to f32 on the device. Synchronous; allocates and frees its own device
 * memory. Returns 0; CK_EINVAL (NULL pointers, sizes), CK_EUNSUPPORTED (not
 * a quantized type, K not a multiple of its block), CK_EBACKEND. */
CK_CUDA_API int be_cuda_qmatmul(int type, const void *w, int N, int K, const float *x, int M, int x_f16,
                                float *y, float *deq);

/* For tests, and needs no device: the GPU's dequantizers (the very code
 * of kernels/ck_cuda_quant.cu) run on the host: dst (rows, K floats) = the
 * weights w (rows of K elements of a quantized `type`). Returns 0,
 * CK_EINVAL, or CK_EUNSUPPORTED as be_cuda_qmatmul. */
CK_CUDA_API int be_cuda_qdequant_host(int type, const void *w, int rows, int K, float *dst);

#ifdef __cplusplus
}
#endif
#endif
