// The attention kernel compiled for avx2 (see attention_impl.h).
#define PAGODA_ATTN_NS avx2
#include "backend/cpu/attention_impl.h"
