// The elementwise ops compiled for avx512 (see ops_impl.h).
#define PAGODA_OPS_NS avx512
#include "backend/cpu/ops_impl.h"
