// The attention kernel compiled for generic (see attention_impl.h).
#define PAGODA_ATTN_NS generic
#include "backend/cpu/attention_impl.h"
