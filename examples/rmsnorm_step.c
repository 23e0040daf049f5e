/* A training step's RMSNorm on the caller's own OpenCL context and queue, with the norm weight
 * frozen (LoRA/PEFT): forward, then backward that computes dx only. Built and run by the tests. */
#include <normgrad.h>

#include <stdio.h>
#include <stdlib.h>

int main(void) {
  /* The application owns the OpenCL objects; normgrad only borrows them. */
  cl_platform_id plat;
  cl_device_id dev;
  cl_int err = clGetPlatformIDs(1, &plat, NULL);
  if (err == CL_SUCCESS) err = clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &dev, NULL);
  if (err != CL_SUCCESS) return fprintf(stderr, "no OpenCL device\n"), 1;
  cl_context cl = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
  cl_command_queue q = clCreateCommandQueue(cl, dev, 0, &err);

  enum { ROWS = 16, N = 1024 };
  float *host = malloc(sizeof(float) * ROWS * N);
  for (int i = 0; i < ROWS * N; i++) host[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
  const size_t act = sizeof(float) * ROWS * N;
  cl_mem x = clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, act, host, &err);
  cl_mem dy = clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, act, host, &err);
  cl_mem w = clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof(float) * N, host, &err);
  cl_mem y = clCreateBuffer(cl, CL_MEM_READ_WRITE, act, NULL, &err);
  cl_mem dx = clCreateBuffer(cl, CL_MEM_READ_WRITE, act, NULL, &err);
  cl_mem rstd = clCreateBuffer(cl, CL_MEM_READ_WRITE, sizeof(float) * ROWS, NULL, &err);

  ng_context *ng = NULL;
  ng_status s = ng_context_create(cl, dev, &ng);
  ng_rmsnorm_params p = {ROWS, N, 1e-6f, 0.0f, NG_CAST_LLAMA};
  cl_event done = NULL;
  if (s == NG_SUCCESS)
    s = ng_rmsnorm_forward(ng, q, &p, ng_tensor_of(x, 0, NG_F32), ng_tensor_of(w, 0, NG_F32),
                           ng_tensor_of(y, 0, NG_F32), ng_tensor_of(rstd, 0, NG_F32), 0, NULL,
                           NULL);
  /* Frozen weight: no dweight buffer, so the dW work is compiled out and no scratch is made. */
  if (s == NG_SUCCESS)
    s = ng_rmsnorm_backward(ng, q, &p, ng_tensor_of(dy, 0, NG_F32), ng_tensor_of(x, 0, NG_F32),
                            ng_tensor_of(w, 0, NG_F32), ng_tensor_of(rstd, 0, NG_F32),
                            ng_tensor_of(dx, 0, NG_F32), ng_tensor_none(), 0, ng_tensor_none(), 0,
                            NULL, &done);
  if (s != NG_SUCCESS) {
    fprintf(stderr, "normgrad: %s: %s\n", ng_status_name(s), ng_last_error_detail());
    return 1;
  }
  clWaitForEvents(1, &done);
  clReleaseEvent(done);
  clEnqueueReadBuffer(q, dx, CL_TRUE, 0, act, host, 0, NULL, NULL);
  printf("dx[0..3] = %g %g %g %g\n", host[0], host[1], host[2], host[3]);

  ng_context_release(ng);
  cl_mem all[] = {x, dy, w, y, dx, rstd};
  for (int i = 0; i < 6; i++) clReleaseMemObject(all[i]);
  clReleaseCommandQueue(q);
  clReleaseContext(cl);
  free(host);
  return 0;
}
