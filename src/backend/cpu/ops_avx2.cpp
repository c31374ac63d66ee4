// The elementwise ops compiled for avx2 (see ops_impl.h).
#define PAGODA_OPS_NS avx2
#include "backend/cpu/ops_impl.h"
