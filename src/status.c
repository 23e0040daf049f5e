/* Status codes: one table for names and messages, OpenCL codes named too, and a per-thread detail
 * message for the last failure. */
#include "ng_internal.h"

#include <stdio.h>
#include <string.h>

typedef struct {
  int code;
  const char *name;
  const char *message;
} status_row;

static const status_row ng_rows[] = {
#define NG_ROW_(name, code, msg) {code, #name, msg},
    NG_STATUS_TABLE(NG_ROW_)
#undef NG_ROW_
};

/* OpenCL 1.2 codes plus the ICD loader's; messages are short paraphrases of the code's name. */
#define CL_TABLE(X)                                                                                \
  X(CL_DEVICE_NOT_FOUND, -1, "no OpenCL device found")                                             \
  X(CL_DEVICE_NOT_AVAILABLE, -2, "OpenCL device not available")                                    \
  X(CL_COMPILER_NOT_AVAILABLE, -3, "OpenCL compiler not available")                                \
  X(CL_MEM_OBJECT_ALLOCATION_FAILURE, -4, "device memory allocation failed")                       \
  X(CL_OUT_OF_RESOURCES, -5, "device out of resources")                                            \
  X(CL_OUT_OF_HOST_MEMORY, -6, "OpenCL implementation out of host memory")                         \
  X(CL_PROFILING_INFO_NOT_AVAILABLE, -7, "profiling information not available")                    \
  X(CL_MEM_COPY_OVERLAP, -8, "overlapping memory copy")                                            \
  X(CL_IMAGE_FORMAT_MISMATCH, -9, "image format mismatch")                                         \
  X(CL_IMAGE_FORMAT_NOT_SUPPORTED, -10, "image format not supported")                              \
  X(CL_BUILD_PROGRAM_FAILURE, -11, "program build failed")                                         \
  X(CL_MAP_FAILURE, -12, "map failure")                                                            \
  X(CL_MISALIGNED_SUB_BUFFER_OFFSET, -13, "misaligned sub-buffer offset")                          \
  X(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST, -14, "an event in the wait list failed")        \
  X(CL_COMPILE_PROGRAM_FAILURE, -15, "program compile failed")                                     \
  X(CL_LINKER_NOT_AVAILABLE, -16, "linker not available")                                          \
  X(CL_LINK_PROGRAM_FAILURE, -17, "program link failed")                                           \
  X(CL_DEVICE_PARTITION_FAILED, -18, "device partition failed")                                    \
  X(CL_KERNEL_ARG_INFO_NOT_AVAILABLE, -19, "kernel argument info not available")                   \
  X(CL_INVALID_VALUE, -30, "invalid value")                                                        \
  X(CL_INVALID_DEVICE_TYPE, -31, "invalid device type")                                            \
  X(CL_INVALID_PLATFORM, -32, "invalid platform")                                                  \
  X(CL_INVALID_DEVICE, -33, "invalid device")                                                      \
  X(CL_INVALID_CONTEXT, -34, "invalid context")                                                    \
  X(CL_INVALID_QUEUE_PROPERTIES, -35, "invalid queue properties")                                  \
  X(CL_INVALID_COMMAND_QUEUE, -36, "invalid command queue")                                        \
  X(CL_INVALID_HOST_PTR, -37, "invalid host pointer")                                              \
  X(CL_INVALID_MEM_OBJECT, -38, "invalid memory object")                                           \
  X(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR, -39, "invalid image format descriptor")                    \
  X(CL_INVALID_IMAGE_SIZE, -40, "invalid image size")                                              \
  X(CL_INVALID_SAMPLER, -41, "invalid sampler")                                                    \
  X(CL_INVALID_BINARY, -42, "invalid program binary")                                              \
  X(CL_INVALID_BUILD_OPTIONS, -43, "invalid build options")                                        \
  X(CL_INVALID_PROGRAM, -44, "invalid program")                                                    \
  X(CL_INVALID_PROGRAM_EXECUTABLE, -45, "program not built for the device")                        \
  X(CL_INVALID_KERNEL_NAME, -46, "invalid kernel name")                                            \
  X(CL_INVALID_KERNEL_DEFINITION, -47, "invalid kernel definition")                                \
  X(CL_INVALID_KERNEL, -48, "invalid kernel")                                                      \
  X(CL_INVALID_ARG_INDEX, -49, "invalid kernel argument index")                                    \
  X(CL_INVALID_ARG_VALUE, -50, "invalid kernel argument value")                                    \
  X(CL_INVALID_ARG_SIZE, -51, "invalid kernel argument size")                                      \
  X(CL_INVALID_KERNEL_ARGS, -52, "kernel arguments not set")                                       \
  X(CL_INVALID_WORK_DIMENSION, -53, "invalid work dimension")                                      \
  X(CL_INVALID_WORK_GROUP_SIZE, -54, "invalid work-group size")                                    \
  X(CL_INVALID_WORK_ITEM_SIZE, -55, "invalid work-item size")                                      \
  X(CL_INVALID_GLOBAL_OFFSET, -56, "invalid global offset")                                        \
  X(CL_INVALID_EVENT_WAIT_LIST, -57, "invalid event wait list")                                    \
  X(CL_INVALID_EVENT, -58, "invalid event")                                                        \
  X(CL_INVALID_OPERATION, -59, "invalid operation")                                                \
  X(CL_INVALID_GL_OBJECT, -60, "invalid GL object")                                                \
  X(CL_INVALID_BUFFER_SIZE, -61, "invalid buffer size")                                            \
  X(CL_INVALID_MIP_LEVEL, -62, "invalid mip level")                                                \
  X(CL_INVALID_GLOBAL_WORK_SIZE, -63, "invalid global work size")                                  \
  X(CL_INVALID_PROPERTY, -64, "invalid property")                                                  \
  X(CL_INVALID_IMAGE_DESCRIPTOR, -65, "invalid image descriptor")                                  \
  X(CL_INVALID_COMPILER_OPTIONS, -66, "invalid compiler options")                                  \
  X(CL_INVALID_LINKER_OPTIONS, -67, "invalid linker options")                                      \
  X(CL_INVALID_DEVICE_PARTITION_COUNT, -68, "invalid device partition count")                      \
  X(CL_PLATFORM_NOT_FOUND_KHR, -1001, "no OpenCL platform found (ICD loader)")

static const status_row cl_rows[] = {
#define CL_ROW_(name, code, msg) {code, #name, msg},
    CL_TABLE(CL_ROW_)
#undef CL_ROW_
};

static const status_row *find_row(ng_status s) {
  for (size_t i = 0; i < NG_ARRAY_LEN(ng_rows); i++)
    if (ng_rows[i].code == s) return &ng_rows[i];
  for (size_t i = 0; i < NG_ARRAY_LEN(cl_rows); i++)
    if (cl_rows[i].code == s) return &cl_rows[i];
  return NULL;
}

const char *ng_status_name(ng_status s) {
  const status_row *r = find_row(s);
  return r ? r->name : "NG_UNKNOWN_STATUS";
}

const char *ng_status_message(ng_status s) {
  const status_row *r = find_row(s);
  return r ? r->message : "unknown status code";
}

static _Thread_local char detail[1024];

const char *ng_last_error_detail(void) { return detail; }

void ng_clear_detail(void) { detail[0] = '\0'; }

ng_status ng_fail(ng_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  return status;
}

unsigned ng_version_number(void) { return NG_VERSION_NUMBER; }
const char *ng_version_string(void) { return NG_VERSION_STRING; }

size_t ng_dtype_size(ng_dtype d) {
  switch (d) {
  case NG_F32: return 4;
  case NG_F16: return 2;
  case NG_BF16: return 2;
  case NG_I32: return 4;
  case NG_I64: return 8;
  }
  return 0;
}

const char *ng_dtype_name(ng_dtype d) {
  switch (d) {
  case NG_F32: return "f32";
  case NG_F16: return "f16";
  case NG_BF16: return "bf16";
  case NG_I32: return "i32";
  case NG_I64: return "i64";
  }
  return NULL;
}
