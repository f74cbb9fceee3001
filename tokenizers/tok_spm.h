/* A small C interface to the distribution's libsentencepiece (tok_spm.cc is its only C++ file).
 * It loads a SentencePiece .model, encodes to ids or pieces, decodes, and reports each piece
 * and its type. It knows no model family: T5's sentinels and </s> (tok_t5.c), or GLM's command
 * tokens, are added on top in C. A loaded model is read-only, so encoding is thread-safe. */
#ifndef TOK_SPM_H
#define TOK_SPM_H

#include <stddef.h>
#include <stdint.h>

/* tok_spm.cc includes the C headers below with C linkage (neither has its own guard) */
#ifdef __cplusplus
extern "C" {
#endif

#include "runtime/base/rt_status.h"
#include "tokenizers/tok.h"

typedef struct tok_spm tok_spm; /* opaque */

/* The piece types of SentencePiece's ModelProto that its C++ API can tell apart (it has no
 * IsUserDefined, so a user-defined piece such as GLM's <n> reads as NORMAL). */
typedef enum {
    TOK_SPM_NORMAL = 0,
    TOK_SPM_UNKNOWN, /* <unk>: decodes (by id) to " \xE2\x81\x87 " */
    TOK_SPM_CONTROL, /* <s>, </s>, <pad>: never produced by encode, decode to "" */
    TOK_SPM_BYTE,    /* <0xNN> byte-fallback pieces */
    TOK_SPM_UNUSED,
} tok_spm_type;

/* Loads a .model file (a serialized ModelProto). RT_ERR_IO for a missing file, RT_ERR_FORMAT
 * for one that does not parse; the message names the path. */
rt_status tok_spm_load(const char *path, tok_spm **out);
void tok_spm_free(tok_spm *m);

int tok_spm_piece_count(const tok_spm *m);
/* The piece of id as stored in the model ("\xE2\x96\x81the" for "▁the"); valid while m lives.
 * id must be in [0, tok_spm_piece_count). */
const char *tok_spm_piece(const tok_spm *m, int32_t id);
tok_spm_type tok_spm_piece_type(const tok_spm *m, int32_t id);
/* The model's own special ids (its TrainerSpec), -1 when it has none. */
int32_t tok_spm_unk_id(const tok_spm *m);
int32_t tok_spm_bos_id(const tok_spm *m);
int32_t tok_spm_eos_id(const tok_spm *m);
int32_t tok_spm_pad_id(const tok_spm *m);

/* Encodes len bytes of UTF-8 text exactly as SentencePieceProcessor::Encode (normalization,
 * dummy prefix, no bos/eos), appending the ids to out. */
rt_status tok_spm_encode(const tok_spm *m, const char *text, size_t len, tok_ids *out);
/* The same, as pieces: *pieces gets n malloc'd strings (an unknown piece is its surface text,
 * not "<unk>"), freed with tok_spm_pieces_free. */
rt_status tok_spm_encode_pieces(const tok_spm *m, const char *text, size_t len, char ***pieces, size_t *n);
void tok_spm_pieces_free(char **pieces, size_t n);

/* SentencePieceProcessor::Decode of ids (each in range, else RT_ERR_FORMAT) into a malloc'd
 * NUL-terminated string. */
rt_status tok_spm_decode_ids(const tok_spm *m, const int32_t *ids, size_t n, char **out);
/* Decode of piece strings, as Python's sp.decode(list of str): a piece not in the model comes
 * out as its own text, and the first piece loses its leading "▁". */
rt_status tok_spm_decode_pieces(const tok_spm *m, const char *const *pieces, size_t n, char **out);

#ifdef __cplusplus
}
#endif

#endif
