// SPDX-License-Identifier: GPL-2.0-only
/*
 * qprof-floor: the physics under a stack's CPU per byte on this machine,
 * in CPU nanoseconds per byte: AES-128-GCM seal and open of records of one
 * size through the linked crypto library (OpenSSL for TLS over TCP, built
 * again against msquic's quictls for QUIC), and one memory copy of the
 * same chunks. One JSON line on stdout.
 *
 * Plaintext is read from, and decrypted plaintext and copies written to,
 * a region larger than the last-level cache, as a stack's socket and
 * application buffers are; each operation runs until --seconds of this
 * thread's CPU time has passed (CLOCK_THREAD_CPUTIME_ID).
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

#define REGION (64u << 20) /* beyond any LLC here */
#define TAG 16
#define NCIPHER 64 /* ciphertexts cycled through by open */

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
	unsigned long long t0, bytes, seal_ns, open_ns, copy_ns, seq = 0;
	unsigned char *region, *dst, *cipher;
	double seconds = 0.3;
	EVP_CIPHER_CTX *enc, *dec;
	size_t off;
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
	region = aligned_alloc(64, REGION);
	dst = aligned_alloc(64, REGION);
	cipher = aligned_alloc(64, (size_t)NCIPHER * (size + TAG));
	enc = EVP_CIPHER_CTX_new();
	dec = EVP_CIPHER_CTX_new();
	if (!region || !dst || !cipher || !enc || !dec)
		die("allocation");
	for (off = 0; off < REGION; off += 8)
		*(unsigned long long *)(region + off) = off * 0x9e3779b97f4a7c15ull;
	memset(dst, 1, REGION);
	if (!EVP_EncryptInit_ex(enc, EVP_aes_128_gcm(), NULL, key, NULL) ||
	    !EVP_DecryptInit_ex(dec, EVP_aes_128_gcm(), NULL, key, NULL))
		die("cipher init");

	/* seal: plaintext from the region, ciphertext into one hot record */
	bytes = 0, off = 0, t0 = cpu_ns();
	for (unsigned long long i = 0;; i++) {
		seal(enc, region + off, cipher, (int)size, seq++);
		bytes += size;
		off = off + 2 * size > REGION ? 0 : off + size;
		if ((i & 15) == 15 && cpu_ns() - t0 >= seconds * 1e9)
			break;
	}
	seal_ns = cpu_ns() - t0;
	double seal_nspb = (double)seal_ns / bytes;

	/* open: NCIPHER records cycled, plaintext out into the region */
	for (int i = 0; i < NCIPHER; i++)
		seal(enc, region + (size_t)i * size, cipher + (size_t)i * (size + TAG), (int)size,
		     (unsigned long long)i);
	bytes = 0, off = 0, t0 = cpu_ns();
	for (unsigned long long i = 0;; i++) {
		unsigned long long k = i % NCIPHER;

		open_(dec, cipher + k * (size + TAG), dst + off, (int)size, k);
		bytes += size;
		off = off + 2 * size > REGION ? 0 : off + size;
		if ((i & 15) == 15 && cpu_ns() - t0 >= seconds * 1e9)
			break;
	}
	open_ns = cpu_ns() - t0;
	double open_nspb = (double)open_ns / bytes;

	/* one copy: region to region, record by record */
	bytes = 0, off = 0, t0 = cpu_ns();
	for (unsigned long long i = 0;; i++) {
		memcpy(dst + off, region + off, size);
		bytes += size;
		off = off + 2 * size > REGION ? 0 : off + size;
		if ((i & 63) == 63 && cpu_ns() - t0 >= seconds * 1e9)
			break;
	}
	copy_ns = cpu_ns() - t0;
	double copy_nspb = (double)copy_ns / bytes;

	printf("{\"library\":\"%s\",\"aead\":\"AES-128-GCM\",\"record_bytes\":%ld,\"seconds\":%g,"
	       "\"seal_ns_per_byte\":%.5f,\"open_ns_per_byte\":%.5f,\"copy_ns_per_byte\":%.5f,\"check\":%u}\n",
	       OpenSSL_version(OPENSSL_VERSION), size, seconds, seal_nspb, open_nspb, copy_nspb,
	       (unsigned)dst[REGION / 3]);
	EVP_CIPHER_CTX_free(enc);
	EVP_CIPHER_CTX_free(dec);
	free(region);
	free(dst);
	free(cipher);
	return 0;
}
