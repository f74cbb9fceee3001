/* The one C++ file: tok_spm.h's C calls over sentencepiece::SentencePieceProcessor. Only what
 * needs the C++ API lives here; model-family rules (T5, GLM) are C code on top. No exception
 * crosses into C: each call catches them and returns an rt_status. */
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <sys/stat.h>
#include <vector>

#include <sentencepiece_processor.h>

#include "tokenizers/tok_spm.h"

struct tok_spm {
    sentencepiece::SentencePieceProcessor sp;
    std::string path; /* for error messages */
};

/* A malloc'd copy of s (C callers free it with free()). */
static char *tok_spm_strdup(const std::string &s) {
    char *p = static_cast<char *>(rt_xmalloc(s.size() + 1));
    std::memcpy(p, s.data(), s.size());
    p[s.size()] = '\0';
    return p;
}

extern "C" rt_status tok_spm_load(const char *path, tok_spm **out) {
    *out = nullptr;
    struct stat sb;
    if (stat(path, &sb) != 0) return rt_errorf(RT_ERR_IO, "%s: cannot open: %s", path, std::strerror(errno));
    tok_spm *m = nullptr;
    try {
        m = new tok_spm;
        m->path = path;
        const sentencepiece::util::Status s = m->sp.Load(path);
        if (!s.ok()) {
            rt_status st = rt_errorf(RT_ERR_FORMAT, "%s: not a SentencePiece model: %s", path, s.ToString().c_str());
            delete m;
            return st;
        }
        if (m->sp.GetPieceSize() <= 0) {
            delete m;
            return rt_errorf(RT_ERR_FORMAT, "%s: SentencePiece model has no pieces", path);
        }
    } catch (const std::exception &e) {
        delete m;
        return rt_errorf(RT_ERR_NOMEM, "%s: loading the SentencePiece model failed: %s", path, e.what());
    }
    *out = m;
    return RT_OK;
}

extern "C" void tok_spm_free(tok_spm *m) { delete m; }

extern "C" int tok_spm_piece_count(const tok_spm *m) { return m->sp.GetPieceSize(); }

extern "C" const char *tok_spm_piece(const tok_spm *m, int32_t id) {
    RT_CHECK(id >= 0 && id < m->sp.GetPieceSize(), "id=%d of %d", id, m->sp.GetPieceSize());
    return m->sp.IdToPiece(id).c_str();
}

extern "C" tok_spm_type tok_spm_piece_type(const tok_spm *m, int32_t id) {
    RT_CHECK(id >= 0 && id < m->sp.GetPieceSize(), "id=%d of %d", id, m->sp.GetPieceSize());
    if (m->sp.IsUnknown(id)) return TOK_SPM_UNKNOWN;
    if (m->sp.IsControl(id)) return TOK_SPM_CONTROL;
    if (m->sp.IsByte(id)) return TOK_SPM_BYTE;
    if (m->sp.IsUnused(id)) return TOK_SPM_UNUSED;
    return TOK_SPM_NORMAL;
}

extern "C" int32_t tok_spm_unk_id(const tok_spm *m) { return m->sp.unk_id(); }
extern "C" int32_t tok_spm_bos_id(const tok_spm *m) { return m->sp.bos_id(); }
extern "C" int32_t tok_spm_eos_id(const tok_spm *m) { return m->sp.eos_id(); }
extern "C" int32_t tok_spm_pad_id(const tok_spm *m) { return m->sp.pad_id(); }

extern "C" rt_status tok_spm_encode(const tok_spm *m, const char *text, size_t len, tok_ids *out) {
    try {
        std::vector<int> ids;
        const sentencepiece::util::Status s = m->sp.Encode(std::string_view(text, len), &ids);
        if (!s.ok()) return rt_errorf(RT_ERR_RUNTIME, "%s: encode failed: %s", m->path.c_str(), s.ToString().c_str());
        for (int id : ids) tok_ids_push(out, id);
    } catch (const std::exception &e) {
        return rt_errorf(RT_ERR_NOMEM, "%s: encode failed: %s", m->path.c_str(), e.what());
    }
    return RT_OK;
}

extern "C" rt_status tok_spm_encode_pieces(const tok_spm *m, const char *text, size_t len, char ***pieces, size_t *n) {
    *pieces = nullptr;
    *n = 0;
    try {
        std::vector<std::string> ps;
        const sentencepiece::util::Status s = m->sp.Encode(std::string_view(text, len), &ps);
        if (!s.ok()) return rt_errorf(RT_ERR_RUNTIME, "%s: encode failed: %s", m->path.c_str(), s.ToString().c_str());
        char **arr = static_cast<char **>(rt_xcalloc(ps.size() + 1, sizeof *arr));
        for (size_t i = 0; i < ps.size(); i++) arr[i] = tok_spm_strdup(ps[i]);
        *pieces = arr;
        *n = ps.size();
    } catch (const std::exception &e) {
        return rt_errorf(RT_ERR_NOMEM, "%s: encode failed: %s", m->path.c_str(), e.what());
    }
    return RT_OK;
}

extern "C" void tok_spm_pieces_free(char **pieces, size_t n) {
    if (!pieces) return;
    for (size_t i = 0; i < n; i++) std::free(pieces[i]);
    std::free(pieces);
}

extern "C" rt_status tok_spm_decode_ids(const tok_spm *m, const int32_t *ids, size_t n, char **out) {
    *out = nullptr;
    const int size = m->sp.GetPieceSize();
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= size)
            return rt_errorf(RT_ERR_FORMAT, "%s: cannot decode id %d (position %zu): the model has %d pieces",
                             m->path.c_str(), ids[i], i, size);
    try {
        std::vector<int> v(ids, ids + n);
        std::string text;
        const sentencepiece::util::Status s = m->sp.Decode(v, &text);
        if (!s.ok()) return rt_errorf(RT_ERR_RUNTIME, "%s: decode failed: %s", m->path.c_str(), s.ToString().c_str());
        *out = tok_spm_strdup(text);
    } catch (const std::exception &e) {
        return rt_errorf(RT_ERR_NOMEM, "%s: decode failed: %s", m->path.c_str(), e.what());
    }
    return RT_OK;
}

extern "C" rt_status tok_spm_decode_pieces(const tok_spm *m, const char *const *pieces, size_t n, char **out) {
    *out = nullptr;
    try {
        std::vector<std::string> v(pieces, pieces + n);
        std::string text;
        const sentencepiece::util::Status s = m->sp.Decode(v, &text);
        if (!s.ok()) return rt_errorf(RT_ERR_RUNTIME, "%s: decode failed: %s", m->path.c_str(), s.ToString().c_str());
        *out = tok_spm_strdup(text);
    } catch (const std::exception &e) {
        return rt_errorf(RT_ERR_NOMEM, "%s: decode failed: %s", m->path.c_str(), e.what());
    }
    return RT_OK;
}
