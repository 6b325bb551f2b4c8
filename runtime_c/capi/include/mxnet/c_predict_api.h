/* MXNet's C predict API, as Apache MXNet 1.9.1 declares it (include/mxnet/c_predict_api.h): the same types
 * and prototypes, so that a program written for MXNet's predict API compiles unchanged against a library that
 * mxcc compiled for one network (runtime_c/capi/c_predict_api.c implements it). Written for mxcc; only the
 * interface is MXNet's. Two additions, neither of which changes a prototype: <stdint.h> (MXNet's header uses
 * uint32_t without including it) and, in C, <stdbool.h> (MXPredSetMonitorCallback takes a bool).
 *
 * Every function returns 0 on success and -1 on failure, with the message in MXGetLastError() (per thread).
 * What differs from MXNet, because the library is one network compiled for one shape:
 *   - MXPredCreate* refuse a symbol JSON that is not the compiled network (structurally: ops, attributes,
 *     wiring) and input shapes other than the compiled ones; dev_type must be 1 (CPU);
 *   - MXPredReshape accepts the compiled shapes only (it returns a new predictor sharing the weights);
 *   - MXPredCreatePartialOut accepts the network's own outputs (by node name, MXNet's "<name>_output");
 *   - MXPredPartialForward runs the whole forward at step 0 (step_left is then 0);
 *   - MXPredSetMonitorCallback is refused (fused kernels have no per-operator outputs to report).
 * Threads: a predictor is used by one thread at a time; any number of predictors run at once, in any threads
 * (MXPredCreateMultiThread's share one copy of the weights). */
#ifndef MXNET_C_PREDICT_API_H_
#define MXNET_C_PREDICT_API_H_

#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

#ifdef _WIN32
#ifdef MXNET_EXPORTS
#define MXNET_DLL __declspec(dllexport)
#else
#define MXNET_DLL __declspec(dllimport)
#endif
#else
#define MXNET_DLL
#endif

typedef uint32_t mx_uint;
typedef float mx_float;
typedef void *PredictorHandle;
typedef void *NDListHandle;
typedef void *NDArrayHandle;
typedef void (*PredMonitorCallback)(const char*,
                                    NDArrayHandle,
                                    void*);

/* The message of the last failure in this thread. */
MXNET_DLL const char* MXGetLastError();

/* A predictor of the network in symbol_json_str with the params of the .params file in param_bytes (its
 * param_size bytes), for dev_type 1 (CPU); inputs input_keys[i] of shape
 * input_shape_data[input_shape_indptr[i] .. input_shape_indptr[i + 1]). */
MXNET_DLL int MXPredCreate(const char* symbol_json_str,
                           const void* param_bytes,
                           int param_size,
                           int dev_type, int dev_id,
                           uint32_t num_input_nodes,
                           const char** input_keys,
                           const uint32_t* input_shape_indptr,
                           const uint32_t* input_shape_data,
                           PredictorHandle* out);

/* MXPredCreate, with dtypes for some arguments (MXNet's type flags: 0, float32, only). */
MXNET_DLL int MXPredCreateEx(const char* symbol_json_str,
                             const void* param_bytes,
                             int param_size,
                             int dev_type, int dev_id,
                             const uint32_t num_input_nodes,
                             const char** input_keys,
                             const uint32_t* input_shape_indptr,
                             const uint32_t* input_shape_data,
                             const uint32_t num_provided_arg_dtypes,
                             const char** provided_arg_dtype_names,
                             const int* provided_arg_dtypes,
                             PredictorHandle* out);

/* MXPredCreate, returning the outputs named output_keys (node names) in that order. */
MXNET_DLL int MXPredCreatePartialOut(const char* symbol_json_str,
                                     const void* param_bytes,
                                     int param_size,
                                     int dev_type, int dev_id,
                                     uint32_t num_input_nodes,
                                     const char** input_keys,
                                     const uint32_t* input_shape_indptr,
                                     const uint32_t* input_shape_data,
                                     uint32_t num_output_nodes,
                                     const char** output_keys,
                                     PredictorHandle* out);

/* num_threads predictors into out[0 .. num_threads), one per thread, sharing one copy of the weights. */
MXNET_DLL int MXPredCreateMultiThread(const char* symbol_json_str,
                                      const void* param_bytes,
                                      int param_size,
                                      int dev_type, int dev_id,
                                      uint32_t num_input_nodes,
                                      const char** input_keys,
                                      const uint32_t* input_shape_indptr,
                                      const uint32_t* input_shape_data,
                                      int num_threads,
                                      PredictorHandle* out);

/* A predictor for other input shapes sharing handle's weights (here: the compiled shapes only). */
MXNET_DLL int MXPredReshape(uint32_t num_input_nodes,
                  const char** input_keys,
                  const uint32_t* input_shape_indptr,
                  const uint32_t* input_shape_data,
                  PredictorHandle handle,
                  PredictorHandle* out);

/* The shape of output `index`; *shape_data stays valid until the next call on this predictor. */
MXNET_DLL int MXPredGetOutputShape(PredictorHandle handle,
                                   uint32_t index,
                                   uint32_t** shape_data,
                                   uint32_t* shape_ndim);

/* The dtype (type flag) of output `out_index`: 0, float32. */
MXNET_DLL int MXPredGetOutputType(PredictorHandle handle,
                                  uint32_t out_index,
                                  int* out_dtype);

/* Copy `size` floats (the input's size exactly) into input `key`. */
MXNET_DLL int MXPredSetInput(PredictorHandle handle,
                             const char* key,
                             const float* data,
                             uint32_t size);

MXNET_DLL int MXPredForward(PredictorHandle handle);

/* Step `step` of the forward; *step_left: the steps after it. */
MXNET_DLL int MXPredPartialForward(PredictorHandle handle, int step, int* step_left);

/* Copy output `index` into data[size]; size must be the output's. */
MXNET_DLL int MXPredGetOutput(PredictorHandle handle,
                              uint32_t index,
                              float* data,
                              uint32_t size);

MXNET_DLL int MXPredFree(PredictorHandle handle);

/* The arrays of an NDArray file in memory (a mean image), as float32. */
MXNET_DLL int MXNDListCreate(const char* nd_file_bytes,
                             int nd_file_size,
                             NDListHandle *out,
                             uint32_t* out_length);

/* Array `index` of a list: its key (name), data and shape, valid until MXNDListFree. */
MXNET_DLL int MXNDListGet(NDListHandle handle,
                          uint32_t index,
                          const char** out_key,
                          const float** out_data,
                          const uint32_t** out_shape,
                          uint32_t* out_ndim);

MXNET_DLL int MXPredSetMonitorCallback(PredictorHandle handle,
                                       PredMonitorCallback callback,
                                       void* callback_handle,
                                       bool monitor_all);

MXNET_DLL int MXNDListFree(NDListHandle handle);

#ifdef __cplusplus
}
#endif

#endif  /* MXNET_C_PREDICT_API_H_ */
