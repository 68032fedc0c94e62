/* fake_injector.c - a stand-in for a third-party CUDA injection library (zymtrace-style): CUDA loads the
   library named by CUDA_INJECTION64_PATH at cuInit and calls InitializeInjection(). */
#include <stdio.h>
int InitializeInjection(void) {
    fprintf(stderr, "[fake_injector] InitializeInjection called\n");
    return 1;
}
