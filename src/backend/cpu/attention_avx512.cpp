// The attention kernel compiled for avx512 (see attention_impl.h).
#define PAGODA_ATTN_NS avx512
#include "backend/cpu/attention_impl.h"
