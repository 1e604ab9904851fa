/* BLAKE3 (hash mode, 32-byte output) for tracebound's verify kernel. See _blake3.c.
 *
 * Written from the BLAKE3 specification (IV, message schedule, flags, chunk and tree
 * layout); differential-tested against the official `blake3` package in
 * tests/unit/test_verifykernel.py, in every code path (portable, SSE4.1, AVX2, AVX-512VL).
 */
#ifndef TRACEBOUND_BLAKE3_H
#define TRACEBOUND_BLAKE3_H

#include <stddef.h>
#include <stdint.h>

#define TB_B3_OUT_LEN 32

/* One message to hash: the concatenation a || b (either part may be empty), hashed into
 * `out` (32 bytes). Splitting the message lets a chain link hash prev_hash || body without
 * copying the body. */
typedef struct {
    const uint8_t *a;
    size_t alen;
    const uint8_t *b;
    size_t blen;
    uint8_t *out;
} tb_b3_msg;

/* AVX512VL: the AVX2 code with AVX-512VL's one-instruction rotates (still eight lanes). */
enum { TB_B3_PORTABLE = 0, TB_B3_SSE41 = 1, TB_B3_AVX2 = 2, TB_B3_AVX512VL = 3 };

/* Detect the CPU once; must be called before anything else (the module init does). */
void tb_b3_init(void);
/* The best level this CPU supports, and the level in use. */
int tb_b3_best_level(void);
int tb_b3_level(void);
/* Use `level` (clamped to what the CPU supports); returns the level now in use. A test
 * hook: it lets the differential tests run every code path on one machine. */
int tb_b3_set_level(int level);
/* Hash `n` independent messages, several at once in SIMD lanes. Returns 0, or -1 if a
 * scratch allocation failed (only messages longer than one 1024-byte chunk need one). */
int tb_b3_hash_many(const tb_b3_msg *msgs, size_t n);

/* Hash one message a || b into m->out, one block after another with the best single-block
 * compression (row-wise SIMD): for a chained record, whose hash waits on the one before. */
void tb_b3_hash_one(const tb_b3_msg *m);

#endif
