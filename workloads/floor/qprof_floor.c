// SPDX-License-Identifier: GPL-2.0-only
/*
 * qprof-floor: the physics under a stack's CPU per byte on this machine,
 * in CPU nanoseconds per byte: AES-128-GCM seal and open of records of one
 * size through the linked crypto library (OpenSSL for TLS over TCP, built
 * again against msquic's quictls for QUIC), and one memory copy of the
 * same chunks. One JSON line on stdout.
 *
 * Plaintext is read from, and decrypted plaintext and copies written to,
 * buffers in cache (WINDOW); each operation runs for --seconds of this
 * thread's CPU time (CLOCK_THREAD_CPUTIME_ID) in all, in ROUNDS rounds
 * interleaved with the others, and its least cost per byte over the
 * rounds is reported.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

/*
 * The buffers the operations read and write: 256 KiB, in any L2 here,
 * or two records if larger. A floor is the least the work can cost, and
 * a stack's buffers are hot: a receiver decrypts into a buffer it reuses,
 * the kernel copies from one the sender has just written. Through a
 * region beyond the last-level cache, the tcp-tls server ran at 0.95x its
 * "floor" on 2026-11-27.
 */
#define WINDOW (256u << 10)
#define TAG 16
#define ROUNDS 5 /* rounds of the three; each one's least is kept */

static unsigned long long cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

static void die(const char *what)
{
	fprintf(stderr, "qprof-floor: %s failed\n", what);
	exit(1);
}

static const unsigned char key[16] = "qprof-floor-key";
static unsigned char iv[12];

static void seal(EVP_CIPHER_CTX *c, const unsigned char *in, unsigned char *out, int n,
		 unsigned long long seq)
{
	int len;

	memcpy(iv + 4, &seq, sizeof(seq));
	if (!EVP_EncryptInit_ex(c, NULL, NULL, NULL, iv) ||
	    !EVP_EncryptUpdate(c, out, &len, in, n) || !EVP_EncryptFinal_ex(c, out + len, &len) ||
	    !EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, TAG, out + n))
		die("seal");
}

static void open_(EVP_CIPHER_CTX *c, unsigned char *in, unsigned char *out, int n,
		  unsigned long long seq)
{
	int len;

	memcpy(iv + 4, &seq, sizeof(seq));
	if (!EVP_DecryptInit_ex(c, NULL, NULL, NULL, iv) ||
	    !EVP_DecryptUpdate(c, out, &len, in, n) ||
	    !EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, TAG, in + n) ||
	    EVP_DecryptFinal_ex(c, out + len, &len) <= 0)
		die("open (tag mismatch)");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {{"size", required_argument, NULL, 's'},
					     {"seconds", required_argument, NULL, 't'},
					     {"help", no_argument, NULL, 'h'},
					     {}};
	unsigned long long t0, bytes, seq = 0;
	unsigned char *region, *dst, *cipher;
	double seconds = 0.3;
	EVP_CIPHER_CTX *enc, *dec;
	size_t off, region_bytes, ncipher;
	long size = 16384;
	char *end;
	int o;

	while ((o = getopt_long(argc, argv, "s:t:h", opts, NULL)) != -1) {
		switch (o) {
		case 's':
			errno = 0;
			size = strtol(optarg, &end, 10);
			if (errno || *end || size < 64 || size > (1 << 20)) {
				fprintf(stderr,
					"qprof-floor: --size takes 64 to 1048576 bytes, not %s\n",
					optarg);
				return 2;
			}
			break;
		case 't':
			seconds = strtod(optarg, &end);
			if (*end || seconds <= 0 || seconds > 60) {
				fprintf(stderr,
					"qprof-floor: --seconds takes a number above 0 and up to 60, not %s\n",
					optarg);
				return 2;
			}
			break;
		default:
			fprintf(stderr,
				"usage: qprof-floor [--size BYTES] [--seconds S]\n"
				"AES-128-GCM seal/open and memcpy of BYTES-byte records, CPU ns per byte, as JSON.\n"
				"EXAMPLES:\n  qprof-floor --size 16384    # TLS records\n"
				"  qprof-floor --size 1440     # QUIC packets at MTU 1500\n");
			return o == 'h' ? 0 : 2;
		}
	}
	region_bytes = (size_t)size * 2 > WINDOW ? ((size_t)size * 2 + 63) & ~(size_t)63 : WINDOW;
	region = aligned_alloc(64, region_bytes);
	dst = aligned_alloc(64, region_bytes);
	/* open cycles ciphertexts within WINDOW too, at least two; the last is seal's */
	ncipher = WINDOW / (size + TAG) > 3 ? WINDOW / (size + TAG) : 3;
	cipher = aligned_alloc(64, (ncipher * (size + TAG) + 63) & ~(size_t)63);
	enc = EVP_CIPHER_CTX_new();
	dec = EVP_CIPHER_CTX_new();
	if (!region || !dst || !cipher || !enc || !dec)
		die("allocation");
	for (off = 0; off < region_bytes; off += 8)
		*(unsigned long long *)(region + off) = off * 0x9e3779b97f4a7c15ull;
	memset(dst, 1, region_bytes);
	if (!EVP_EncryptInit_ex(enc, EVP_aes_128_gcm(), NULL, key, NULL) ||
	    !EVP_DecryptInit_ex(dec, EVP_aes_128_gcm(), NULL, key, NULL))
		die("cipher init");

	for (size_t i = 0; i + 1 < ncipher; i++)
		seal(enc, region + (i * size) % (region_bytes - size + 1),
		     cipher + (size_t)i * (size + TAG), (int)size, (unsigned long long)i);

	/*
	 * ROUNDS rounds of the three operations, interleaved, each for its
	 * share of --seconds; each operation's least cost over the rounds is
	 * its floor, so a burst of steal or of a neighbour's memory traffic
	 * in one round does not raise it (timeit's minimum).
	 */
	double seal_nspb = 0, open_nspb = 0, copy_nspb = 0, share = seconds / ROUNDS;
	size_t soff = 0, ooff = 0, coff = 0;

	for (int r = 0; r < ROUNDS; r++) {
		double nspb;

		/* seal: plaintext from the region, ciphertext into one hot record */
		bytes = 0, t0 = cpu_ns();
		for (unsigned long long i = 0;; i++) {
			seal(enc, region + soff, cipher + (ncipher - 1) * (size + TAG), (int)size,
			     ncipher + seq++);
			bytes += size;
			soff = soff + 2 * size > region_bytes ? 0 : soff + size;
			if ((i & 15) == 15 && cpu_ns() - t0 >= share * 1e9)
				break;
		}
		nspb = (double)(cpu_ns() - t0) / bytes;
		seal_nspb = r == 0 || nspb < seal_nspb ? nspb : seal_nspb;

		/* open: records cycled, plaintext out into the region; the
		 * last record is seal's scratch, so cycle the others */
		bytes = 0, t0 = cpu_ns();
		for (unsigned long long i = 0;; i++) {
			unsigned long long k = i % (ncipher - 1);

			open_(dec, cipher + k * (size + TAG), dst + ooff, (int)size, k);
			bytes += size;
			ooff = ooff + 2 * size > region_bytes ? 0 : ooff + size;
			if ((i & 15) == 15 && cpu_ns() - t0 >= share * 1e9)
				break;
		}
		nspb = (double)(cpu_ns() - t0) / bytes;
		open_nspb = r == 0 || nspb < open_nspb ? nspb : open_nspb;

		/* one copy: region to region, record by record */
		bytes = 0, t0 = cpu_ns();
		for (unsigned long long i = 0;; i++) {
			memcpy(dst + coff, region + coff, size);
			bytes += size;
			coff = coff + 2 * size > region_bytes ? 0 : coff + size;
			if ((i & 63) == 63 && cpu_ns() - t0 >= share * 1e9)
				break;
		}
		nspb = (double)(cpu_ns() - t0) / bytes;
		copy_nspb = r == 0 || nspb < copy_nspb ? nspb : copy_nspb;
	}

	printf("{\"library\":\"%s\",\"aead\":\"AES-128-GCM\",\"record_bytes\":%ld,\"seconds\":%g,"
	       "\"rounds\":%d,\"seal_ns_per_byte\":%.5f,\"open_ns_per_byte\":%.5f,\"copy_ns_per_byte\":%.5f,"
	       "\"check\":%u}\n",
	       OpenSSL_version(OPENSSL_VERSION), size, seconds, ROUNDS, seal_nspb, open_nspb,
	       copy_nspb, (unsigned)dst[region_bytes / 3]);
	EVP_CIPHER_CTX_free(enc);
	EVP_CIPHER_CTX_free(dec);
	free(region);
	free(dst);
	free(cipher);
	return 0;
}
