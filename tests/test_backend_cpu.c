/* test_backend_cpu.c: the CPU backend's own ops (those that are not kernels):
 * RoPE from the backend's cos / sin table gives the same bits as the
 * rotation computed afresh (a backend whose context is too short for the
 * positions has no table for them), for both pairings, several positions
 * and heads, and other frequencies than the table's. */
#include "test_util.h"

#include "model/backend.h"

#include <math.h>

static void rope_table_same_bits(void **state) {
    (void)state;
    enum { HD = 64, HALF = HD / 2, NH = 3, NT = 5 };
    mtplx_backend *tab = NULL, *none = NULL;
    assert_int_equal(mtplx_backend_cpu_new(1, 256, 16, 64, &tab), MTPLX_OK);
    assert_int_equal(mtplx_backend_cpu_new(1, 256, 16, 1, &none), MTPLX_OK); /* positions >= 1: no table */
    float freq[HALF], other[HALF];
    for (int i = 0; i < HALF; i++) {
        freq[i] = (float)(1.0 / pow(10000.0, 2.0 * i / HD));
        other[i] = (float)(1.0 / pow(1000000.0, 2.0 * i / HD));
    }
    static float x[NT * NH * HD], a[NT * NH * HD], b[NT * NH * HD];
    uint64_t s = 7;
    for (int i = 0; i < NT * NH * HD; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 11) * 0x1.0p-53 * 4 - 2);
    }
    const int64_t pos0s[] = {1, 40, 3, 59, 20}; /* out of order: the table fills ahead, then is reread */
    for (int neox = 0; neox <= 1; neox++)
        for (size_t p = 0; p < sizeof pos0s / sizeof *pos0s; p++)
            for (int f = 0; f < 2; f++) {
                const float *fr = f ? other : freq; /* the second set: computed afresh by both */
                memcpy(a, x, sizeof x);
                memcpy(b, x, sizeof x);
                tab->rope(tab, a, NT, NH, HD, pos0s[p], fr, neox);
                none->rope(none, b, NT, NH, HD, pos0s[p], fr, neox);
                assert_memory_equal(a, b, sizeof x);
                assert_memory_not_equal(a, x, sizeof x);
            }
    tab->free(tab);
    none->free(none);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rope_table_same_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
