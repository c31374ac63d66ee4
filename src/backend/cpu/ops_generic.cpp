// The elementwise ops compiled for generic (see ops_impl.h).
#define PAGODA_OPS_NS generic
#include "backend/cpu/ops_impl.h"
