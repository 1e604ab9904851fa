/* BLAKE3 for tracebound's verify kernel: many independent messages, hashed in SIMD lanes.
 *
 * Why not the `blake3` package: it hashes one message per call (about 1.8 us for a 1 KB
 * record from Python, of which the hashing is a small part), and a single chunk gets no
 * SIMD parallelism there. A ledger page holds thousands of independent records, so here the
 * parallelism is across records: each SIMD lane compresses a block of a different message.
 *
 * Written from the BLAKE3 specification: the SHA-256 IV, the 7-round compression function
 * with its message permutation, the CHUNK_START / CHUNK_END / PARENT / ROOT flags, 1024-byte
 * chunks with their chunk counter, and the binary tree whose left subtree holds the largest
 * power-of-two number of chunks (built here by pairing level by level, carrying an odd last
 * node up unchanged, which yields the same tree). Only hash mode with a 32-byte output.
 *
 * Structure: a *step* compresses one block in each of N lanes (N = 1 portable, 4 SSE4.1,
 * 8 AVX2); the lanes' chaining values stay in word-major ("transposed") form between steps.
 * A scheduler feeds each lane *jobs*: a chunk (1..16 chained blocks) or a parent node (one
 * block). When a lane finishes its job it is refilled from the queue at once, so messages of
 * different lengths keep every lane busy. Chunks come first; then parent nodes level by
 * level, for messages longer than one chunk.
 *
 * `tb_b3_hash_one` hashes one message block after block with a scalar compression whose
 * message schedule is written out as constants: the append path, where each record's hash
 * waits on the previous one.
 */
#include "_blake3.h"

#include <stdlib.h>
#include <string.h>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define TB_X86_SIMD 1
#include <immintrin.h>
#endif

#define CHUNK_START 1u
#define CHUNK_END 2u
#define PARENT 4u
#define ROOT 8u
#define BLOCK_LEN 64
#define CHUNK_LEN 1024
#define MAX_LANES 8

static const uint32_t IV[8] = {0x6A09E667u, 0xBB67AE85u, 0x3C6EF372u, 0xA54FF53Au,
                                0x510E527Fu, 0x9B05688Cu, 0x1F83D9ABu, 0x5BE0CD19u};
static const uint8_t PERMUTATION[16] = {2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8};
/* SCHEDULE[r][i]: the message word used at position i of round r (the permutation applied
 * r times); filled in by tb_b3_init. */
static uint8_t SCHEDULE[7][16];

static inline uint32_t load32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void store32(uint8_t *p, uint32_t w) {
    p[0] = (uint8_t)w;
    p[1] = (uint8_t)(w >> 8);
    p[2] = (uint8_t)(w >> 16);
    p[3] = (uint8_t)(w >> 24);
}

static inline uint32_t rotr32(uint32_t w, unsigned c) { return (w >> c) | (w << (32 - c)); }

/* Compress one block in each of N lanes. cvT is word-major: word w of lane l is
 * cvT[w * N + l]; it holds the input chaining values and receives the outputs. */
typedef void (*step_fn)(uint32_t *cvT, const uint8_t *const *blocks, const uint32_t *ctr_lo,
                        const uint32_t *ctr_hi, const uint32_t *blen, const uint32_t *flags);

/* --- portable: one lane ---------------------------------------------------------------- */

#define G1(a, b, c, d, x, y)              \
    do {                                  \
        v[a] = v[a] + v[b] + (x);         \
        v[d] = rotr32(v[d] ^ v[a], 16);   \
        v[c] = v[c] + v[d];               \
        v[b] = rotr32(v[b] ^ v[c], 12);   \
        v[a] = v[a] + v[b] + (y);         \
        v[d] = rotr32(v[d] ^ v[a], 8);    \
        v[c] = v[c] + v[d];               \
        v[b] = rotr32(v[b] ^ v[c], 7);    \
    } while (0)

static void step_portable(uint32_t *cvT, const uint8_t *const *blocks, const uint32_t *ctr_lo,
                          const uint32_t *ctr_hi, const uint32_t *blen, const uint32_t *flags) {
    uint32_t m[16], v[16];
    for (int i = 0; i < 16; i++) m[i] = load32(blocks[0] + 4 * i);
    for (int i = 0; i < 8; i++) v[i] = cvT[i];
    v[8] = IV[0];
    v[9] = IV[1];
    v[10] = IV[2];
    v[11] = IV[3];
    v[12] = ctr_lo[0];
    v[13] = ctr_hi[0];
    v[14] = blen[0];
    v[15] = flags[0];
    for (int r = 0; r < 7; r++) {
        const uint8_t *s = SCHEDULE[r];
        G1(0, 4, 8, 12, m[s[0]], m[s[1]]);
        G1(1, 5, 9, 13, m[s[2]], m[s[3]]);
        G1(2, 6, 10, 14, m[s[4]], m[s[5]]);
        G1(3, 7, 11, 15, m[s[6]], m[s[7]]);
        G1(0, 5, 10, 15, m[s[8]], m[s[9]]);
        G1(1, 6, 11, 12, m[s[10]], m[s[11]]);
        G1(2, 7, 8, 13, m[s[12]], m[s[13]]);
        G1(3, 4, 9, 14, m[s[14]], m[s[15]]);
    }
    for (int i = 0; i < 8; i++) cvT[i] = v[i] ^ v[i + 8];
}

#ifdef TB_X86_SIMD

/* --- SSE4.1: four lanes ---------------------------------------------------------------- */

#define ROT16_128(x) _mm_shuffle_epi8((x), r16)
#define ROT8_128(x) _mm_shuffle_epi8((x), r8)
#define ROT12_128(x) _mm_or_si128(_mm_srli_epi32((x), 12), _mm_slli_epi32((x), 20))
#define ROT7_128(x) _mm_or_si128(_mm_srli_epi32((x), 7), _mm_slli_epi32((x), 25))
#define G4(a, b, c, d, x, y)                                         \
    do {                                                             \
        v[a] = _mm_add_epi32(_mm_add_epi32(v[a], v[b]), (x));        \
        v[d] = ROT16_128(_mm_xor_si128(v[d], v[a]));                 \
        v[c] = _mm_add_epi32(v[c], v[d]);                            \
        v[b] = ROT12_128(_mm_xor_si128(v[b], v[c]));                 \
        v[a] = _mm_add_epi32(_mm_add_epi32(v[a], v[b]), (y));        \
        v[d] = ROT8_128(_mm_xor_si128(v[d], v[a]));                  \
        v[c] = _mm_add_epi32(v[c], v[d]);                            \
        v[b] = ROT7_128(_mm_xor_si128(v[b], v[c]));                  \
    } while (0)

__attribute__((target("sse4.1"))) static void step_sse41(uint32_t *cvT,
                                                         const uint8_t *const *blocks,
                                                         const uint32_t *ctr_lo,
                                                         const uint32_t *ctr_hi,
                                                         const uint32_t *blen,
                                                         const uint32_t *flags) {
    const __m128i r16 = _mm_setr_epi8(2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
    const __m128i r8 = _mm_setr_epi8(1, 2, 3, 0, 5, 6, 7, 4, 9, 10, 11, 8, 13, 14, 15, 12);
    __m128i v[16], m[16];
    for (int g = 0; g < 4; g++) {
        /* words 4g..4g+3 of each lane, transposed to one vector per word */
        __m128i a = _mm_loadu_si128((const __m128i *)(blocks[0] + 16 * g));
        __m128i b = _mm_loadu_si128((const __m128i *)(blocks[1] + 16 * g));
        __m128i c = _mm_loadu_si128((const __m128i *)(blocks[2] + 16 * g));
        __m128i d = _mm_loadu_si128((const __m128i *)(blocks[3] + 16 * g));
        __m128i t0 = _mm_unpacklo_epi32(a, b), t1 = _mm_unpacklo_epi32(c, d);
        __m128i t2 = _mm_unpackhi_epi32(a, b), t3 = _mm_unpackhi_epi32(c, d);
        m[4 * g + 0] = _mm_unpacklo_epi64(t0, t1);
        m[4 * g + 1] = _mm_unpackhi_epi64(t0, t1);
        m[4 * g + 2] = _mm_unpacklo_epi64(t2, t3);
        m[4 * g + 3] = _mm_unpackhi_epi64(t2, t3);
    }
    for (int w = 0; w < 8; w++) v[w] = _mm_loadu_si128((const __m128i *)(cvT + 4 * w));
    for (int w = 0; w < 4; w++) v[8 + w] = _mm_set1_epi32((int)IV[w]);
    v[12] = _mm_loadu_si128((const __m128i *)ctr_lo);
    v[13] = _mm_loadu_si128((const __m128i *)ctr_hi);
    v[14] = _mm_loadu_si128((const __m128i *)blen);
    v[15] = _mm_loadu_si128((const __m128i *)flags);
    for (int r = 0; r < 7; r++) {
        const uint8_t *s = SCHEDULE[r];
        G4(0, 4, 8, 12, m[s[0]], m[s[1]]);
        G4(1, 5, 9, 13, m[s[2]], m[s[3]]);
        G4(2, 6, 10, 14, m[s[4]], m[s[5]]);
        G4(3, 7, 11, 15, m[s[6]], m[s[7]]);
        G4(0, 5, 10, 15, m[s[8]], m[s[9]]);
        G4(1, 6, 11, 12, m[s[10]], m[s[11]]);
        G4(2, 7, 8, 13, m[s[12]], m[s[13]]);
        G4(3, 4, 9, 14, m[s[14]], m[s[15]]);
    }
    for (int w = 0; w < 8; w++)
        _mm_storeu_si128((__m128i *)(cvT + 4 * w), _mm_xor_si128(v[w], v[w + 8]));
}

/* --- AVX2: eight lanes (and the same with AVX-512VL's one-instruction rotates) ------- */

#define ROT16_256(x) _mm256_shuffle_epi8((x), r16)
#define ROT8_256(x) _mm256_shuffle_epi8((x), r8)
#define ROT12_256(x) _mm256_or_si256(_mm256_srli_epi32((x), 12), _mm256_slli_epi32((x), 20))
#define ROT7_256(x) _mm256_or_si256(_mm256_srli_epi32((x), 7), _mm256_slli_epi32((x), 25))
#define G8(a, b, c, d, x, y, R16, R12, R8, R7)                        \
    do {                                                              \
        v[a] = _mm256_add_epi32(_mm256_add_epi32(v[a], v[b]), (x));   \
        v[d] = R16(_mm256_xor_si256(v[d], v[a]));                     \
        v[c] = _mm256_add_epi32(v[c], v[d]);                          \
        v[b] = R12(_mm256_xor_si256(v[b], v[c]));                     \
        v[a] = _mm256_add_epi32(_mm256_add_epi32(v[a], v[b]), (y));   \
        v[d] = R8(_mm256_xor_si256(v[d], v[a]));                      \
        v[c] = _mm256_add_epi32(v[c], v[d]);                          \
        v[b] = R7(_mm256_xor_si256(v[b], v[c]));                      \
    } while (0)

/* The body of an eight-lane step, parameterised by how it rotates. */
#define STEP8_BODY(R16, R12, R8, R7)                                                          \
    const __m256i r16 = _mm256_setr_epi8(2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13, \
                                         2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13); \
    const __m256i r8 = _mm256_setr_epi8(1, 2, 3, 0, 5, 6, 7, 4, 9, 10, 11, 8, 13, 14, 15, 12,   \
                                        1, 2, 3, 0, 5, 6, 7, 4, 9, 10, 11, 8, 13, 14, 15, 12);  \
    (void)r16;                                                                                \
    (void)r8;                                                                                 \
    __m256i v[16], m[16];                                                                     \
    for (int h = 0; h < 2; h++) {                                                             \
        /* words 8h..8h+7 of each lane: an 8x8 transpose of 32-bit words */                   \
        __m256i r[8];                                                                         \
        for (int l = 0; l < 8; l++)                                                           \
            r[l] = _mm256_loadu_si256((const __m256i *)(blocks[l] + 32 * h));                 \
        __m256i t0 = _mm256_unpacklo_epi32(r[0], r[1]), t1 = _mm256_unpackhi_epi32(r[0], r[1]); \
        __m256i t2 = _mm256_unpacklo_epi32(r[2], r[3]), t3 = _mm256_unpackhi_epi32(r[2], r[3]); \
        __m256i t4 = _mm256_unpacklo_epi32(r[4], r[5]), t5 = _mm256_unpackhi_epi32(r[4], r[5]); \
        __m256i t6 = _mm256_unpacklo_epi32(r[6], r[7]), t7 = _mm256_unpackhi_epi32(r[6], r[7]); \
        __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);       \
        __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);       \
        __m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);       \
        __m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);       \
        m[8 * h + 0] = _mm256_permute2x128_si256(u0, u4, 0x20);                               \
        m[8 * h + 1] = _mm256_permute2x128_si256(u1, u5, 0x20);                               \
        m[8 * h + 2] = _mm256_permute2x128_si256(u2, u6, 0x20);                               \
        m[8 * h + 3] = _mm256_permute2x128_si256(u3, u7, 0x20);                               \
        m[8 * h + 4] = _mm256_permute2x128_si256(u0, u4, 0x31);                               \
        m[8 * h + 5] = _mm256_permute2x128_si256(u1, u5, 0x31);                               \
        m[8 * h + 6] = _mm256_permute2x128_si256(u2, u6, 0x31);                               \
        m[8 * h + 7] = _mm256_permute2x128_si256(u3, u7, 0x31);                               \
    }                                                                                         \
    for (int w = 0; w < 8; w++) v[w] = _mm256_loadu_si256((const __m256i *)(cvT + 8 * w));   \
    for (int w = 0; w < 4; w++) v[8 + w] = _mm256_set1_epi32((int)IV[w]);                     \
    v[12] = _mm256_loadu_si256((const __m256i *)ctr_lo);                                      \
    v[13] = _mm256_loadu_si256((const __m256i *)ctr_hi);                                      \
    v[14] = _mm256_loadu_si256((const __m256i *)blen);                                        \
    v[15] = _mm256_loadu_si256((const __m256i *)flags);                                       \
    for (int r = 0; r < 7; r++) {                                                             \
        const uint8_t *s = SCHEDULE[r];                                                       \
        G8(0, 4, 8, 12, m[s[0]], m[s[1]], R16, R12, R8, R7);                                  \
        G8(1, 5, 9, 13, m[s[2]], m[s[3]], R16, R12, R8, R7);                                  \
        G8(2, 6, 10, 14, m[s[4]], m[s[5]], R16, R12, R8, R7);                                 \
        G8(3, 7, 11, 15, m[s[6]], m[s[7]], R16, R12, R8, R7);                                 \
        G8(0, 5, 10, 15, m[s[8]], m[s[9]], R16, R12, R8, R7);                                 \
        G8(1, 6, 11, 12, m[s[10]], m[s[11]], R16, R12, R8, R7);                               \
        G8(2, 7, 8, 13, m[s[12]], m[s[13]], R16, R12, R8, R7);                                \
        G8(3, 4, 9, 14, m[s[14]], m[s[15]], R16, R12, R8, R7);                                \
    }                                                                                         \
    for (int w = 0; w < 8; w++)                                                               \
        _mm256_storeu_si256((__m256i *)(cvT + 8 * w), _mm256_xor_si256(v[w], v[w + 8]));

__attribute__((target("avx2"))) static void step_avx2(uint32_t *cvT,
                                                      const uint8_t *const *blocks,
                                                      const uint32_t *ctr_lo,
                                                      const uint32_t *ctr_hi,
                                                      const uint32_t *blen,
                                                      const uint32_t *flags) {
    STEP8_BODY(ROT16_256, ROT12_256, ROT8_256, ROT7_256)
}

#define ROR16_VL(x) _mm256_ror_epi32((x), 16)
#define ROR12_VL(x) _mm256_ror_epi32((x), 12)
#define ROR8_VL(x) _mm256_ror_epi32((x), 8)
#define ROR7_VL(x) _mm256_ror_epi32((x), 7)

__attribute__((target("avx2,avx512f,avx512vl"))) static void step_avx512vl(
    uint32_t *cvT, const uint8_t *const *blocks, const uint32_t *ctr_lo, const uint32_t *ctr_hi,
    const uint32_t *blen, const uint32_t *flags) {
    STEP8_BODY(ROR16_VL, ROR12_VL, ROR8_VL, ROR7_VL)
}

#endif /* TB_X86_SIMD */

/* --- dispatch -------------------------------------------------------------------------- */

static int best_level = TB_B3_PORTABLE;
static int level = TB_B3_PORTABLE;

void tb_b3_init(void) {
    uint8_t cur[16], next[16];
    for (int i = 0; i < 16; i++) cur[i] = (uint8_t)i;
    for (int r = 0; r < 7; r++) {
        memcpy(SCHEDULE[r], cur, 16);
        for (int i = 0; i < 16; i++) next[i] = cur[PERMUTATION[i]];
        memcpy(cur, next, 16);
    }
    best_level = TB_B3_PORTABLE;
#ifdef TB_X86_SIMD
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.1")) best_level = TB_B3_SSE41;
    if (__builtin_cpu_supports("avx2")) best_level = TB_B3_AVX2;
    if (best_level == TB_B3_AVX2 && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512vl"))
        best_level = TB_B3_AVX512VL;
#endif
    level = best_level;
}

int tb_b3_best_level(void) { return best_level; }
int tb_b3_level(void) { return level; }

int tb_b3_set_level(int want) {
    if (want < TB_B3_PORTABLE) want = TB_B3_PORTABLE;
    level = want > best_level ? best_level : want;
    return level;
}

/* --- scheduler ------------------------------------------------------------------------- */

typedef struct {
    const tb_b3_msg *m;
    const uint8_t *pblock; /* parent jobs: the 64-byte block (two child chaining values) */
    uint8_t *dest;         /* the job's 32-byte output: a chaining value or the hash */
    size_t off;            /* chunk jobs: byte offset of the current block in the message */
    uint64_t counter;      /* chunk index (0 for parents) */
    uint32_t block, nblocks, last_len, flags, root;
    int active;
} lane_t;

/* Copy message bytes [off, off+len) of a || b into a zeroed 64-byte block. */
static void gather(const tb_b3_msg *m, size_t off, size_t len, uint8_t *dst) {
    size_t done = 0;
    memset(dst, 0, BLOCK_LEN);
    if (off < m->alen) {
        size_t k = m->alen - off;
        if (k > len) k = len;
        memcpy(dst, m->a + off, k);
        done = k;
    }
    if (done < len) memcpy(dst + done, m->b + (off + done - m->alen), len - done);
}

typedef struct {
    size_t msg;   /* index of the message this tree belongs to */
    size_t off;   /* its first chaining value in the level buffers */
    size_t count; /* chaining values at the current level */
} tree_t;

typedef struct {
    const tb_b3_msg *msgs;
    size_t n;
    /* phase 1 (chunks) */
    size_t mi;
    uint64_t chunk;
    size_t tree_i; /* index of the next tree to register */
    /* phase 2 (parents) */
    tree_t *trees;
    size_t ntrees;
    size_t ti, pair;
    uint8_t *cv_in, *cv_out;
} jobs_t;

static inline size_t msg_len(const tb_b3_msg *m) { return m->alen + m->blen; }
static inline uint64_t chunk_count(size_t len) {
    return len == 0 ? 1 : ((uint64_t)len + CHUNK_LEN - 1) / CHUNK_LEN;
}

static int next_chunk_job(jobs_t *j, lane_t *lane) {
    while (j->mi < j->n) {
        const tb_b3_msg *m = &j->msgs[j->mi];
        size_t len = msg_len(m);
        uint64_t chunks = chunk_count(len);
        if (j->chunk >= chunks) {
            j->mi++;
            j->chunk = 0;
            continue;
        }
        uint64_t c = j->chunk++;
        size_t start = (size_t)c * CHUNK_LEN;
        size_t clen = len - start < CHUNK_LEN ? len - start : CHUNK_LEN;
        uint32_t nblocks = clen == 0 ? 1 : (uint32_t)((clen + BLOCK_LEN - 1) / BLOCK_LEN);
        lane->m = m;
        lane->pblock = NULL;
        lane->off = start;
        lane->counter = c;
        lane->block = 0;
        lane->nblocks = nblocks;
        lane->last_len = (uint32_t)(clen - (size_t)(nblocks - 1) * BLOCK_LEN);
        lane->flags = 0;
        if (chunks == 1) {
            lane->root = ROOT;
            lane->dest = m->out;
        } else {
            /* trees are laid out in message order, and so are the jobs */
            const tree_t *t = &j->trees[j->tree_i];
            lane->root = 0;
            lane->dest = j->cv_in + 32 * (t->off + (size_t)c);
            if (c + 1 == chunks) j->tree_i++;
        }
        return 1;
    }
    return 0;
}

static int next_parent_job(jobs_t *j, lane_t *lane) {
    while (j->ti < j->ntrees) {
        tree_t *t = &j->trees[j->ti];
        if (t->count < 2 || j->pair >= t->count / 2) {
            j->ti++;
            j->pair = 0;
            continue;
        }
        size_t p = j->pair++;
        lane->m = NULL;
        lane->pblock = j->cv_in + 32 * (t->off + 2 * p);
        lane->off = 0;
        lane->counter = 0;
        lane->block = 0;
        lane->nblocks = 1;
        lane->last_len = BLOCK_LEN;
        lane->flags = PARENT;
        if (t->count == 2) {
            lane->root = ROOT;
            lane->dest = j->msgs[t->msg].out;
        } else {
            lane->root = 0;
            lane->dest = j->cv_out + 32 * (t->off + p);
        }
        return 1;
    }
    return 0;
}

typedef int (*next_fn)(jobs_t *, lane_t *);

static void run(int nlanes, step_fn step, jobs_t *jobs, next_fn next) {
    static const uint8_t zero[BLOCK_LEN];
    lane_t lanes[MAX_LANES];
    uint32_t cvT[8 * MAX_LANES];
    uint32_t lo[MAX_LANES], hi[MAX_LANES], bl[MAX_LANES], fl[MAX_LANES];
    const uint8_t *blocks[MAX_LANES];
    uint8_t stage[MAX_LANES][BLOCK_LEN];
    int active = 0, more = 1;
    for (int l = 0; l < nlanes; l++) lanes[l].active = 0;
    for (;;) {
        for (int l = 0; l < nlanes && more; l++) {
            if (lanes[l].active) continue;
            if (!next(jobs, &lanes[l])) {
                more = 0;
                break;
            }
            lanes[l].active = 1;
            active++;
            for (int w = 0; w < 8; w++) cvT[w * nlanes + l] = IV[w];
        }
        if (!active) return;
        for (int l = 0; l < nlanes; l++) {
            lane_t *ln = &lanes[l];
            if (!ln->active) {
                blocks[l] = zero;
                lo[l] = hi[l] = bl[l] = fl[l] = 0;
                continue;
            }
            uint32_t last = ln->block + 1 == ln->nblocks;
            uint32_t len = last ? ln->last_len : BLOCK_LEN;
            uint32_t flags = ln->flags;
            if (ln->pblock != NULL) {
                blocks[l] = ln->pblock;
            } else {
                const tb_b3_msg *m = ln->m;
                if (len == BLOCK_LEN && ln->off >= m->alen) {
                    blocks[l] = m->b + (ln->off - m->alen);
                } else if (len == BLOCK_LEN && ln->off + BLOCK_LEN <= m->alen) {
                    blocks[l] = m->a + ln->off;
                } else {
                    gather(m, ln->off, len, stage[l]);
                    blocks[l] = stage[l];
                }
                if (ln->block == 0) flags |= CHUNK_START;
                if (last) flags |= CHUNK_END;
            }
            if (last) flags |= ln->root;
            lo[l] = (uint32_t)ln->counter;
            hi[l] = (uint32_t)(ln->counter >> 32);
            bl[l] = len;
            fl[l] = flags;
        }
        step(cvT, blocks, lo, hi, bl, fl);
        for (int l = 0; l < nlanes; l++) {
            lane_t *ln = &lanes[l];
            if (!ln->active) continue;
            ln->off += BLOCK_LEN;
            if (++ln->block < ln->nblocks) continue;
            for (int w = 0; w < 8; w++) store32(ln->dest + 4 * w, cvT[w * nlanes + l]);
            ln->active = 0;
            active--;
        }
    }
}


/* --- one message, block after block (the append path: a chain is sequential) ---------- */

/* The compression function on one block, in place on cv. Lanes across messages
 * (tb_b3_hash_many) cannot help a single chained record: its hash waits on the one before.
 * A row-wise SSE4.1 / AVX-512VL compression (the four G functions of a step in one
 * register) was tried and measured slower here than this scalar one (8.6-10k against 5.1k
 * cycles per 1 KB record: each round is one long dependency chain), so it is not kept.
 *
 * Scalar, with the schedule written out (SCHEDULE[r] as constants: each message word is a
 * fixed offset, and the sixteen state words can live in registers; 5.1k against 6.8k cycles
 * per 1 KB record for step_portable's loop over SCHEDULE). */
#define SG(a, b, c, d, x, y)             \
    do {                                 \
        a = a + b + (x);                 \
        d = rotr32(d ^ a, 16);           \
        c = c + d;                       \
        b = rotr32(b ^ c, 12);           \
        a = a + b + (y);                 \
        d = rotr32(d ^ a, 8);            \
        c = c + d;                       \
        b = rotr32(b ^ c, 7);            \
    } while (0)
#define SROUND(s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15) \
    do {                                                                            \
        SG(v0, v4, v8, v12, m[s0], m[s1]);                                          \
        SG(v1, v5, v9, v13, m[s2], m[s3]);                                          \
        SG(v2, v6, v10, v14, m[s4], m[s5]);                                         \
        SG(v3, v7, v11, v15, m[s6], m[s7]);                                         \
        SG(v0, v5, v10, v15, m[s8], m[s9]);                                         \
        SG(v1, v6, v11, v12, m[s10], m[s11]);                                       \
        SG(v2, v7, v8, v13, m[s12], m[s13]);                                        \
        SG(v3, v4, v9, v14, m[s14], m[s15]);                                        \
    } while (0)

static void compress_one(uint32_t cv[8], const uint8_t block[BLOCK_LEN], uint64_t counter,
                         uint32_t blen, uint32_t flags) {
    uint32_t m[16];
    for (int i = 0; i < 16; i++) m[i] = load32(block + 4 * i);
    uint32_t v0 = cv[0], v1 = cv[1], v2 = cv[2], v3 = cv[3], v4 = cv[4], v5 = cv[5], v6 = cv[6],
             v7 = cv[7], v8 = IV[0], v9 = IV[1], v10 = IV[2], v11 = IV[3],
             v12 = (uint32_t)counter, v13 = (uint32_t)(counter >> 32), v14 = blen, v15 = flags;
    SROUND(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    SROUND(2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8);
    SROUND(3, 4, 10, 12, 13, 2, 7, 14, 6, 5, 9, 0, 11, 15, 8, 1);
    SROUND(10, 7, 12, 9, 14, 3, 13, 15, 4, 0, 11, 2, 5, 8, 1, 6);
    SROUND(12, 13, 9, 11, 15, 10, 14, 8, 7, 2, 5, 3, 0, 1, 6, 4);
    SROUND(9, 14, 11, 5, 8, 12, 15, 1, 13, 3, 0, 10, 2, 6, 4, 7);
    SROUND(11, 15, 5, 0, 1, 9, 8, 6, 14, 10, 2, 12, 3, 4, 7, 13);
    cv[0] = v0 ^ v8;
    cv[1] = v1 ^ v9;
    cv[2] = v2 ^ v10;
    cv[3] = v3 ^ v11;
    cv[4] = v4 ^ v12;
    cv[5] = v5 ^ v13;
    cv[6] = v6 ^ v14;
    cv[7] = v7 ^ v15;
}

/* A parent node of two chaining values (32 bytes each, little-endian words) into cv. */
static void parent_one(uint32_t cv[8], const uint8_t left[32], uint32_t flags) {
    uint8_t block[BLOCK_LEN];
    memcpy(block, left, 32);
    for (int i = 0; i < 8; i++) store32(block + 32 + 4 * i, cv[i]);
    memcpy(cv, IV, 8 * sizeof(uint32_t));
    compress_one(cv, block, 0, BLOCK_LEN, PARENT | flags);
}

void tb_b3_hash_one(const tb_b3_msg *m) {
    const size_t len = msg_len(m);
    const uint64_t nchunks = chunk_count(len);
    uint8_t stack[64][32]; /* chaining values of completed subtrees (2^64 chunks at most) */
    int depth = 0;
    uint8_t block[BLOCK_LEN];
    uint32_t cv[8];
    for (uint64_t c = 0; c < nchunks; c++) {
        const size_t start = (size_t)c * CHUNK_LEN;
        const size_t clen = len - start < CHUNK_LEN ? len - start : CHUNK_LEN;
        const uint32_t nblocks = clen == 0 ? 1 : (uint32_t)((clen + BLOCK_LEN - 1) / BLOCK_LEN);
        const int last_chunk = c + 1 == nchunks;
        memcpy(cv, IV, sizeof cv);
        for (uint32_t b = 0; b < nblocks; b++) {
            const size_t off = start + (size_t)b * BLOCK_LEN;
            const size_t blen = clen - (size_t)b * BLOCK_LEN < BLOCK_LEN
                                    ? clen - (size_t)b * BLOCK_LEN
                                    : BLOCK_LEN;
            uint32_t flags = (b == 0 ? CHUNK_START : 0) | (b + 1 == nblocks ? CHUNK_END : 0);
            if (b + 1 == nblocks && nchunks == 1) flags |= ROOT;
            gather(m, off, blen, block);
            compress_one(cv, block, c, (uint32_t)blen, flags);
        }
        if (last_chunk) break;
        /* More input follows: merge every completed pair of subtrees (the lazy rule of the
         * specification's incremental hasher), then push this chunk's chaining value. */
        uint64_t total = c + 1;
        while ((total & 1) == 0) {
            parent_one(cv, stack[--depth], 0);
            total >>= 1;
        }
        for (int i = 0; i < 8; i++) store32(stack[depth] + 4 * i, cv[i]);
        depth++;
    }
    /* The last chunk's chaining value, folded into the stack from the right; the top parent
     * is the root. */
    while (depth > 0) {
        depth--;
        parent_one(cv, stack[depth], depth == 0 ? ROOT : 0);
    }
    for (int i = 0; i < 8; i++) store32(m->out + 4 * i, cv[i]);
}

int tb_b3_hash_many(const tb_b3_msg *msgs, size_t n) {
    int nlanes = 1;
    step_fn step = step_portable;
#ifdef TB_X86_SIMD
    if (level >= TB_B3_AVX512VL) {
        nlanes = 8;
        step = step_avx512vl;
    } else if (level >= TB_B3_AVX2) {
        nlanes = 8;
        step = step_avx2;
    } else if (level >= TB_B3_SSE41) {
        nlanes = 4;
        step = step_sse41;
    }
#endif
    jobs_t jobs;
    memset(&jobs, 0, sizeof jobs);
    jobs.msgs = msgs;
    jobs.n = n;
    /* Messages longer than one chunk need room for their chunks' chaining values. */
    size_t ntrees = 0, total = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t c = chunk_count(msg_len(&msgs[i]));
        if (c > 1) {
            ntrees++;
            total += (size_t)c;
        }
    }
    uint8_t *buf = NULL;
    if (ntrees) {
        jobs.trees = (tree_t *)malloc(ntrees * sizeof(tree_t));
        buf = (uint8_t *)malloc(2 * 32 * total);
        if (jobs.trees == NULL || buf == NULL) {
            free(jobs.trees);
            free(buf);
            return -1;
        }
        size_t off = 0, t = 0;
        for (size_t i = 0; i < n; i++) {
            uint64_t c = chunk_count(msg_len(&msgs[i]));
            if (c > 1) {
                jobs.trees[t].msg = i;
                jobs.trees[t].off = off;
                jobs.trees[t].count = (size_t)c;
                t++;
                off += (size_t)c;
            }
        }
        jobs.ntrees = ntrees;
        jobs.cv_in = buf;
        jobs.cv_out = buf + 32 * total;
    }
    run(nlanes, step, &jobs, next_chunk_job);
    while (ntrees) {
        int more = 0;
        for (size_t t = 0; t < ntrees; t++) {
            tree_t *tr = &jobs.trees[t];
            if (tr->count > 2 && tr->count % 2) /* the odd last node moves up unchanged */
                memcpy(jobs.cv_out + 32 * (tr->off + tr->count / 2),
                       jobs.cv_in + 32 * (tr->off + tr->count - 1), 32);
        }
        jobs.ti = 0;
        jobs.pair = 0;
        run(nlanes, step, &jobs, next_parent_job);
        for (size_t t = 0; t < ntrees; t++) {
            tree_t *tr = &jobs.trees[t];
            if (tr->count > 1) tr->count = (tr->count + 1) / 2;
            if (tr->count > 1) more = 1;
        }
        uint8_t *swap = jobs.cv_in;
        jobs.cv_in = jobs.cv_out;
        jobs.cv_out = swap;
        if (!more) break;
    }
    free(jobs.trees);
    free(buf);
    return 0;
}
