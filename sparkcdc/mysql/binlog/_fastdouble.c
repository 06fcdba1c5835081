/* A double's shortest digits that read back as the same double (Python's repr, MySQL's
 * my_gcvt over dtoa mode 0), by Grisu3 (Florian Loitsch, "Printing Floating-Point Numbers
 * Quickly and Accurately with Integers", PLDI 2010): 64-bit integer arithmetic against a
 * cached power of ten, and a proof at the end that the digits are the shortest and closest.
 * For about 0.5% of doubles it cannot prove it and says so; the caller then asks Python's
 * exact dtoa (PyOS_double_to_string), which costs some 5,000 instructions a double against
 * a few hundred here. tests/mysql/binlog/test_fastjson.py holds both equal on random doubles. */
#include "_fastdouble.h"

#include <string.h>

typedef struct {
    uint64_t f;
    int e;
} DiyFp;

/* 10**k as f * 2**e, f normalized (top bit set), rounded to nearest; k from -348 to 340 by 8 */
static const struct {
    uint64_t f;
    int e, k;
} POWERS[] = {
    {0xfa8fd5a0081c0288ULL, -1220, -348},
    {0xbaaee17fa23ebf76ULL, -1193, -340},
    {0x8b16fb203055ac76ULL, -1166, -332},
    {0xcf42894a5dce35eaULL, -1140, -324},
    {0x9a6bb0aa55653b2dULL, -1113, -316},
    {0xe61acf033d1a45dfULL, -1087, -308},
    {0xab70fe17c79ac6caULL, -1060, -300},
    {0xff77b1fcbebcdc4fULL, -1034, -292},
    {0xbe5691ef416bd60cULL, -1007, -284},
    {0x8dd01fad907ffc3cULL, -980, -276},
    {0xd3515c2831559a83ULL, -954, -268},
    {0x9d71ac8fada6c9b5ULL, -927, -260},
    {0xea9c227723ee8bcbULL, -901, -252},
    {0xaecc49914078536dULL, -874, -244},
    {0x823c12795db6ce57ULL, -847, -236},
    {0xc21094364dfb5637ULL, -821, -228},
    {0x9096ea6f3848984fULL, -794, -220},
    {0xd77485cb25823ac7ULL, -768, -212},
    {0xa086cfcd97bf97f4ULL, -741, -204},
    {0xef340a98172aace5ULL, -715, -196},
    {0xb23867fb2a35b28eULL, -688, -188},
    {0x84c8d4dfd2c63f3bULL, -661, -180},
    {0xc5dd44271ad3cdbaULL, -635, -172},
    {0x936b9fcebb25c996ULL, -608, -164},
    {0xdbac6c247d62a584ULL, -582, -156},
    {0xa3ab66580d5fdaf6ULL, -555, -148},
    {0xf3e2f893dec3f126ULL, -529, -140},
    {0xb5b5ada8aaff80b8ULL, -502, -132},
    {0x87625f056c7c4a8bULL, -475, -124},
    {0xc9bcff6034c13053ULL, -449, -116},
    {0x964e858c91ba2655ULL, -422, -108},
    {0xdff9772470297ebdULL, -396, -100},
    {0xa6dfbd9fb8e5b88fULL, -369, -92},
    {0xf8a95fcf88747d94ULL, -343, -84},
    {0xb94470938fa89bcfULL, -316, -76},
    {0x8a08f0f8bf0f156bULL, -289, -68},
    {0xcdb02555653131b6ULL, -263, -60},
    {0x993fe2c6d07b7facULL, -236, -52},
    {0xe45c10c42a2b3b06ULL, -210, -44},
    {0xaa242499697392d3ULL, -183, -36},
    {0xfd87b5f28300ca0eULL, -157, -28},
    {0xbce5086492111aebULL, -130, -20},
    {0x8cbccc096f5088ccULL, -103, -12},
    {0xd1b71758e219652cULL, -77, -4},
    {0x9c40000000000000ULL, -50, 4},
    {0xe8d4a51000000000ULL, -24, 12},
    {0xad78ebc5ac620000ULL, 3, 20},
    {0x813f3978f8940984ULL, 30, 28},
    {0xc097ce7bc90715b3ULL, 56, 36},
    {0x8f7e32ce7bea5c70ULL, 83, 44},
    {0xd5d238a4abe98068ULL, 109, 52},
    {0x9f4f2726179a2245ULL, 136, 60},
    {0xed63a231d4c4fb27ULL, 162, 68},
    {0xb0de65388cc8ada8ULL, 189, 76},
    {0x83c7088e1aab65dbULL, 216, 84},
    {0xc45d1df942711d9aULL, 242, 92},
    {0x924d692ca61be758ULL, 269, 100},
    {0xda01ee641a708deaULL, 295, 108},
    {0xa26da3999aef774aULL, 322, 116},
    {0xf209787bb47d6b85ULL, 348, 124},
    {0xb454e4a179dd1877ULL, 375, 132},
    {0x865b86925b9bc5c2ULL, 402, 140},
    {0xc83553c5c8965d3dULL, 428, 148},
    {0x952ab45cfa97a0b3ULL, 455, 156},
    {0xde469fbd99a05fe3ULL, 481, 164},
    {0xa59bc234db398c25ULL, 508, 172},
    {0xf6c69a72a3989f5cULL, 534, 180},
    {0xb7dcbf5354e9beceULL, 561, 188},
    {0x88fcf317f22241e2ULL, 588, 196},
    {0xcc20ce9bd35c78a5ULL, 614, 204},
    {0x98165af37b2153dfULL, 641, 212},
    {0xe2a0b5dc971f303aULL, 667, 220},
    {0xa8d9d1535ce3b396ULL, 694, 228},
    {0xfb9b7cd9a4a7443cULL, 720, 236},
    {0xbb764c4ca7a44410ULL, 747, 244},
    {0x8bab8eefb6409c1aULL, 774, 252},
    {0xd01fef10a657842cULL, 800, 260},
    {0x9b10a4e5e9913129ULL, 827, 268},
    {0xe7109bfba19c0c9dULL, 853, 276},
    {0xac2820d9623bf429ULL, 880, 284},
    {0x80444b5e7aa7cf85ULL, 907, 292},
    {0xbf21e44003acdd2dULL, 933, 300},
    {0x8e679c2f5e44ff8fULL, 960, 308},
    {0xd433179d9c8cb841ULL, 986, 316},
    {0x9e19db92b4e31ba9ULL, 1013, 324},
    {0xeb96bf6ebadf77d9ULL, 1039, 332},
    {0xaf87023b9bf0ee6bULL, 1066, 340},
};

static DiyFp mul(DiyFp a, DiyFp b) { /* the product's top 64 bits, rounded */
    __uint128_t p = (__uint128_t)a.f * b.f;
    uint64_t hi = (uint64_t)(p >> 64), lo = (uint64_t)p;
    DiyFp r = {hi + (lo >> 63), a.e + b.e + 64};
    return r;
}

static DiyFp normalize(DiyFp x) {
    int s = __builtin_clzll(x.f);
    x.f <<= s;
    x.e -= s;
    return x;
}

/* Grisu3's last digit: moved down while that brings it closer to the value, then proved
 * (weeding out the cases 64-bit arithmetic cannot decide: 0) */
static int round_weed(char *buf, int len, uint64_t dist_high_w, uint64_t unsafe, uint64_t rest,
                      uint64_t ten_kappa, uint64_t unit) {
    uint64_t small = dist_high_w - unit, big = dist_high_w + unit;
    while (rest < small && unsafe - rest >= ten_kappa &&
           (rest + ten_kappa < small || small - rest >= rest + ten_kappa - small)) {
        buf[len - 1]--;
        rest += ten_kappa;
    }
    if (rest < big && unsafe - rest >= ten_kappa &&
        (rest + ten_kappa < big || big - rest > rest + ten_kappa - big))
        return 0;
    return 2 * unit <= rest && rest <= unsafe - 4 * unit;
}

static const uint32_t TENS[] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000,
                                100000000, 1000000000};

/* the digits of the scaled value between low and high (all three at one exponent, -60..-32) */
static int digit_gen(DiyFp low, DiyFp w, DiyFp high, char *buf, int *len, int *kappa) {
    uint64_t unit = 1;
    DiyFp too_low = {low.f - unit, low.e}, too_high = {high.f + unit, high.e};
    uint64_t unsafe = too_high.f - too_low.f;
    int shift = -w.e;
    uint64_t one = (uint64_t)1 << shift;
    uint32_t integrals = (uint32_t)(too_high.f >> shift);
    uint64_t fractionals = too_high.f & (one - 1);
    int k = 9;
    while (k > 0 && TENS[k] > integrals) k--;
    uint32_t divisor = TENS[k];
    *kappa = k + 1;
    *len = 0;
    while (*kappa > 0) {
        buf[(*len)++] = (char)('0' + integrals / divisor);
        integrals %= divisor;
        (*kappa)--;
        uint64_t rest = ((uint64_t)integrals << shift) + fractionals;
        if (rest < unsafe)
            return round_weed(buf, *len, too_high.f - w.f, unsafe, rest,
                              (uint64_t)divisor << shift, unit);
        divisor /= 10;
    }
    for (;;) {
        fractionals *= 10;
        unit *= 10;
        unsafe *= 10;
        buf[(*len)++] = (char)('0' + (fractionals >> shift));
        fractionals &= one - 1;
        (*kappa)--;
        if (fractionals < unsafe)
            return round_weed(buf, *len, (too_high.f - w.f) * unit, unsafe, fractionals, one,
                              unit);
        if (*len >= 18) return 0;
    }
}

int fdd_shortest(double x, char *digits, int *n, int *decpt) {
    uint64_t bits;
    memcpy(&bits, &x, 8);
    bits &= ~((uint64_t)1 << 63);
    int biased = (int)(bits >> 52);
    uint64_t frac = bits & (((uint64_t)1 << 52) - 1);
    if (biased == 0x7FF || bits == 0) return 0; /* not finite, or zero: the caller's */
    DiyFp v = biased ? (DiyFp){frac | ((uint64_t)1 << 52), biased - 1075} : (DiyFp){frac, -1074};
    /* the halfway points to the neighbouring doubles; the lower one is nearer when v is a
     * power of two above the smallest normal */
    DiyFp plus = normalize((DiyFp){(v.f << 1) + 1, v.e - 1});
    DiyFp minus = (v.f == ((uint64_t)1 << 52) && biased > 1) ? (DiyFp){(v.f << 2) - 1, v.e - 2}
                                                              : (DiyFp){(v.f << 1) - 1, v.e - 1};
    minus.f <<= minus.e - plus.e;
    minus.e = plus.e;
    DiyFp w = normalize(v);
    /* a cached power c with -60 <= c.e + w.e + 64 <= -32 */
    int min_exp = -60 - (w.e + 64);
    int k = (int)((min_exp + 63) * 0.30102999566398114);
    if ((min_exp + 63) * 0.30102999566398114 > k) k++; /* ceil */
    int idx = (348 + k - 1) / 8 + 1;
    if (idx < 0 || idx >= (int)(sizeof(POWERS) / sizeof(POWERS[0]))) return 0;
    DiyFp c = {POWERS[idx].f, POWERS[idx].e};
    DiyFp sw = mul(w, c), sl = mul(minus, c), sh = mul(plus, c);
    if (sw.e < -60 || sw.e > -32) return 0;
    int len, kappa;
    if (!digit_gen(sl, sw, sh, digits, &len, &kappa)) return 0;
    *n = len;
    *decpt = len + (-POWERS[idx].k + kappa);
    return 1;
}
