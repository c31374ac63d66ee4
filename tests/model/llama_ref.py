"""llama.cpp as the reference for the chunked evaluations (perplexity, KL divergence):
its log-probabilities over chunks evaluated each from an empty cache, via
llama-cpp-python. Shared by the perplexity, importance-matrix and KV-cache tests."""
import numpy as np
import llama_cpp


def log_softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def chunk_log_probs(path, chunks, first, **kw):
    """Log-probabilities at positions first .. n_ctx - 2 of each chunk (a list of token
    lists of n_ctx tokens), concatenated; kw go to llama_cpp.Llama (cache types...)."""
    n_ctx = len(chunks[0])
    m = llama_cpp.Llama(str(path), n_ctx=n_ctx, n_batch=n_ctx, logits_all=True, verbose=False,
                        n_threads=2, **kw)
    out = []
    for chunk in chunks:
        m.reset()
        m.eval(chunk)
        out.append(log_softmax(np.array(m.scores[:n_ctx], dtype=np.float64))[first:n_ctx - 1])
    m.close()
    return np.concatenate(out)


def kld(base, lp):
    """KL(base || lp) of each row."""
    return (np.exp(base) * (base - lp)).sum(axis=1)
