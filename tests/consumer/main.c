/* Uses the installed normgrad: checks header/library versions agree and runs one RMSNorm
 * forward on the default device. */
#include <normgrad.h>

#include <stdio.h>

int main(void) {
  if (ng_version_number() != NG_VERSION_NUMBER) {
    fprintf(stderr, "header %s but library %s\n", NG_VERSION_STRING, ng_version_string());
    return 1;
  }
  ng_context *ctx = NULL;
  ng_status s = ng_context_create_default(&ctx);
  cl_command_queue q = NULL;
  cl_mem x = NULL, y = NULL, r = NULL;
  if (s == NG_SUCCESS) {
    cl_int e;
    cl_context cl = ng_context_cl_context(ctx);
    q = clCreateCommandQueue(cl, ng_context_device(ctx), 0, &e);
    float ones[64];
    for (int i = 0; i < 64; i++) ones[i] = 2.0f;
    x = clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof ones, ones, &e);
    y = clCreateBuffer(cl, CL_MEM_READ_WRITE, sizeof ones, NULL, &e);
    r = clCreateBuffer(cl, CL_MEM_READ_WRITE, 4 * sizeof(float), NULL, &e);
    ng_rmsnorm_params p = {4, 16, 0.0f, 0.0f, NG_CAST_GEMMA};
    s = ng_rmsnorm_forward(ctx, q, &p, ng_tensor_of(x, 0, NG_F32), ng_tensor_none(),
                           ng_tensor_of(y, 0, NG_F32), ng_tensor_of(r, 0, NG_F32), 0, NULL, NULL);
  }
  float out[64] = {0};
  if (s == NG_SUCCESS) s = clEnqueueReadBuffer(q, y, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL);
  int bad = s != NG_SUCCESS;
  for (int i = 0; i < 64 && !bad; i++) bad = out[i] != 1.0f; /* 2·rsqrt(4) is exact */
  if (bad) fprintf(stderr, "consumer: %s %s\n", ng_status_name(s), ng_last_error_detail());
  else printf("normgrad %s works: y = %g\n", ng_version_string(), out[0]);
  if (x) clReleaseMemObject(x), clReleaseMemObject(y), clReleaseMemObject(r);
  if (q) clReleaseCommandQueue(q);
  ng_context_release(ctx);
  return bad;
}
