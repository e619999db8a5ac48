/*
 * image_check.c
 *		src/tokenizer/image.c outside the server: the providers' published
 *		examples of image token counts, the size read from images of each
 *		format (made here, byte by byte, in every variant the parser must
 *		handle), raw and in base64, malformed and truncated data, and the
 *		counting rules against brute-force references on generated sizes.
 *
 * Usage: image_check [CASES]        (default 20000 generated sizes)
 *        image_check --write DIR    writes the generated sample images to
 *                                   DIR, to open them with other programs
 * Prints TAP, so prove can run it.
 *
 * The sample images are real files, not just headers: the PNG's pixels are
 * a zlib stream of stored blocks, the GIF's an LZW stream that clears its
 * table every two codes, the JPEG is a baseline grey image whose blocks are
 * all zero (one 1-bit Huffman code each for DC 0 and end-of-block), the
 * WebP lossless one a VP8L stream whose five prefix codes have one symbol
 * each (so every pixel takes no bits).  Only the VP8 (lossy) WebP is a
 * frame header with no image data after it, and the progressive and
 * arithmetic-coded JPEGs are the baseline stream under another SOF marker.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../src/tokenizer/image.h"
#include "check.h"

static void
is(long long got, long long want, const char *what)
{
	ok(got == want, what);
	if (got != want)
		printf("#   got %lld, want %lld\n", got, want);
}

static int
RandIn(int lo, int hi)			/* lo .. hi */
{
	return lo + (int) (Rand() % (uint64_t) (hi - lo + 1));
}

/* ---- a growing byte buffer ---- */

typedef struct Buf
{
	uint8_t    *d;
	size_t		len;
	size_t		cap;
} Buf;

static void
put(Buf *b, const void *p, size_t n)
{
	if (b->len + n > b->cap)
	{
		b->cap = (b->len + n) * 2 + 64;
		b->d = realloc(b->d, b->cap);
		if (b->d == NULL)
			abort();
	}
	memcpy(b->d + b->len, p, n);
	b->len += n;
}
static void
put8(Buf *b, unsigned v)
{
	uint8_t		c = (uint8_t) v;

	put(b, &c, 1);
}
static void
put16be(Buf *b, unsigned v)
{
	put8(b, v >> 8);
	put8(b, v);
}
static void
put16le(Buf *b, unsigned v)
{
	put8(b, v);
	put8(b, v >> 8);
}
static void
put24le(Buf *b, unsigned long v)
{
	put8(b, (unsigned) v);
	put8(b, (unsigned) (v >> 8));
	put8(b, (unsigned) (v >> 16));
}
static void
put32be(Buf *b, unsigned long v)
{
	put16be(b, (unsigned) (v >> 16) & 0xFFFF);
	put16be(b, (unsigned) v & 0xFFFF);
}
static void
put32le(Buf *b, unsigned long v)
{
	put16le(b, (unsigned) v & 0xFFFF);
	put16le(b, (unsigned) (v >> 16) & 0xFFFF);
}
static void
puts_(Buf *b, const char *s)
{
	put(b, s, strlen(s));
}
static void
set32le(Buf *b, size_t at, unsigned long v)
{
	b->d[at] = (uint8_t) v;
	b->d[at + 1] = (uint8_t) (v >> 8);
	b->d[at + 2] = (uint8_t) (v >> 16);
	b->d[at + 3] = (uint8_t) (v >> 24);
}

/* ---- PNG: 1-bit grey, pixels in stored (uncompressed) deflate blocks ---- */

/* a table-driven CRC-32, unlike image.c's bitwise one */
static uint32_t
crc32_table(const uint8_t *p, size_t n)
{
	static uint32_t t[256];
	uint32_t	c = 0xFFFFFFFFu;
	size_t		i;

	if (t[1] == 0)
		for (i = 0; i < 256; i++)
		{
			uint32_t	v = (uint32_t) i;
			int			k;

			for (k = 0; k < 8; k++)
				v = (v & 1) ? 0xEDB88320u ^ (v >> 1) : v >> 1;
			t[i] = v;
		}
	for (i = 0; i < n; i++)
		c = t[(c ^ p[i]) & 0xFF] ^ (c >> 8);
	return c ^ 0xFFFFFFFFu;
}

static void
png_chunk(Buf *b, const char *type, const uint8_t *data, size_t n)
{
	size_t		start;

	put32be(b, (unsigned long) n);
	start = b->len;
	puts_(b, type);
	if (n)
		put(b, data, n);
	put32be(b, crc32_table(b->d + start, n + 4));
}

static void
make_png(Buf *b, uint32_t w, uint32_t h)
{
	uint8_t		ihdr[13];
	Buf			z = {0};
	size_t		row = 1 + (w + 7) / 8,
				raw = row * h,
				done = 0;
	uint32_t	a = 1,
				s2 = 0;
	size_t		i;

	put(b, "\x89PNG\r\n\x1a\n", 8);
	ihdr[0] = w >> 24;
	ihdr[1] = w >> 16;
	ihdr[2] = w >> 8;
	ihdr[3] = w;
	ihdr[4] = h >> 24;
	ihdr[5] = h >> 16;
	ihdr[6] = h >> 8;
	ihdr[7] = h;
	ihdr[8] = 1;				/* bit depth */
	ihdr[9] = 0;				/* greyscale */
	ihdr[10] = ihdr[11] = ihdr[12] = 0;
	png_chunk(b, "IHDR", ihdr, 13);
	/* zlib: header, stored blocks of zeros (filter 0, black), adler-32 */
	put8(&z, 0x78);
	put8(&z, 0x01);
	do
	{
		size_t		n = raw - done < 65535 ? raw - done : 65535;

		put8(&z, done + n == raw ? 1 : 0);
		put16le(&z, (unsigned) n);
		put16le(&z, (unsigned) ~n & 0xFFFF);
		for (i = 0; i < n; i++)
		{
			put8(&z, 0);
			s2 = (s2 + a) % 65521;
		}
		done += n;
	} while (done < raw);
	put32be(&z, ((unsigned long) s2 << 16) | a);
	png_chunk(b, "IDAT", z.d, z.len);
	png_chunk(b, "IEND", NULL, 0);
	free(z.d);
}

/* ---- GIF: 4 colours, LZW with 3-bit codes, cleared every two codes ---- */

typedef struct Bits
{
	Buf		   *b;
	uint32_t	acc;
	int			n;
} Bits;

static void
bits_lsb(Bits *bt, unsigned code, int width)
{
	bt->acc |= (uint32_t) code << bt->n;
	bt->n += width;
	while (bt->n >= 8)
	{
		put8(bt->b, bt->acc & 0xFF);
		bt->acc >>= 8;
		bt->n -= 8;
	}
}

static void
make_gif(Buf *b, unsigned w, unsigned h, unsigned screen_w, unsigned screen_h)
{
	Buf			lzw = {0};
	Bits		bt = {&lzw, 0, 0};
	unsigned long npix = (unsigned long) w * h,
				i;
	size_t		off;

	puts_(b, "GIF89a");
	put16le(b, screen_w);
	put16le(b, screen_h);
	put8(b, 0x81);				/* global colour table of 4 entries */
	put8(b, 0);
	put8(b, 0);
	put(b, "\0\0\0\xff\xff\xff\xff\0\0\0\0\xff", 12);
	put8(b, 0x2C);				/* image descriptor */
	put16le(b, 0);
	put16le(b, 0);
	put16le(b, w);
	put16le(b, h);
	put8(b, 0);
	put8(b, 2);					/* LZW minimum code size */
	for (i = 0; i < npix; i++)
	{
		if (i % 2 == 0)
			bits_lsb(&bt, 4, 3);	/* clear: the table never grows past 7 */
		bits_lsb(&bt, (unsigned) (i % 3 == 0), 3);
	}
	bits_lsb(&bt, 5, 3);		/* end of information */
	if (bt.n)
		put8(&lzw, bt.acc);
	for (off = 0; off < lzw.len; off += 255)
	{
		size_t		n = lzw.len - off < 255 ? lzw.len - off : 255;

		put8(b, (unsigned) n);
		put(b, lzw.d + off, n);
	}
	put8(b, 0);
	put8(b, 0x3B);
	free(lzw.d);
}

/* ---- JPEG: baseline greyscale, every 8x8 block zero ---- */

typedef struct JpegOpts
{
	unsigned	sof;			/* 0xC0 baseline; others only relabel it */
	int			exif;			/* a 60000-byte APP1 first, with a decoy SOF in it */
	int			fill;			/* FF fill bytes before some markers */
	int			rst;			/* a standalone RST0 marker between segments */
} JpegOpts;

static void
make_jpeg(Buf *b, unsigned w, unsigned h, JpegOpts o)
{
	unsigned long blocks = (unsigned long) ((w + 7) / 8) * ((h + 7) / 8),
				i;
	Bits		bt;
	int			k;

	put16be(b, 0xFFD8);
	if (o.exif)
	{
		size_t		start;

		put16be(b, 0xFFE1);
		put16be(b, 60000);
		start = b->len;
		put(b, "Exif\0\0", 6);
		/* a thumbnail's frame header, and marker-like bytes, to be skipped */
		put(b, "\xFF\xD8\xFF\xC0\x00\x0B\x08\x00\x10\x00\x10\x01\x01\x11\x00\xFF\xD9", 17);
		while (b->len - start < 60000 - 2)
			put8(b, (b->len % 7) ? 0xFF : 0xDA);
	}
	put16be(b, 0xFFE0);			/* JFIF */
	put16be(b, 16);
	put(b, "JFIF\0\x01\x01\x00\x00\x01\x00\x01\x00\x00", 14);
	if (o.rst)
		put16be(b, 0xFFD0);
	put16be(b, 0xFFFE);			/* a comment */
	put16be(b, 2 + 6);
	puts_(b, "ctxwin");
	if (o.fill)
		put(b, "\xFF\xFF\xFF", 3);
	put16be(b, 0xFFDB);			/* quantization table 0: all 1 */
	put16be(b, 67);
	put8(b, 0);
	for (k = 0; k < 64; k++)
		put8(b, 1);
	if (o.fill)
		put8(b, 0xFF);
	put8(b, 0xFF);				/* frame header */
	put8(b, o.sof);
	put16be(b, 11);
	put8(b, 8);
	put16be(b, h);
	put16be(b, w);
	put8(b, 1);
	put(b, "\x01\x11\x00", 3);
	for (k = 0; k < 2; k++)		/* DC and AC tables: one 1-bit code, symbol 0 */
	{
		put16be(b, 0xFFC4);
		put16be(b, 20);
		put8(b, k << 4);
		put8(b, 1);
		for (i = 0; i < 15; i++)
			put8(b, 0);
		put8(b, 0);
	}
	put16be(b, 0xFFDA);			/* scan */
	put16be(b, 8);
	put(b, "\x01\x01\x00\x00\x3F\x00", 6);
	/* each block: DC difference 0 ("0"), end of block ("0"); MSB first */
	bt.b = b;
	bt.acc = 0;
	bt.n = 0;
	for (i = 0; i < blocks * 2; i++)
	{
		bt.n++;
		if (bt.n == 8)
		{
			put8(b, 0);
			bt.n = 0;
		}
	}
	if (bt.n)
		put8(b, 0xFF >> bt.n);	/* padded with 1 bits */
	put16be(b, 0xFFD9);
}

/* ---- WebP ---- */

/* VP8L: w, h in 1..16384; one colour, every prefix code a single symbol */
static void
vp8l_chunk(Buf *b, unsigned w, unsigned h)
{
	Buf			bits = {0};
	Bits		bt = {&bits, 0, 0};
	int			k;

	put8(&bits, 0x2F);
	bits_lsb(&bt, w - 1, 14);
	bits_lsb(&bt, h - 1, 14);
	bits_lsb(&bt, 0, 1);		/* alpha not used */
	bits_lsb(&bt, 0, 3);		/* version 0 */
	bits_lsb(&bt, 0, 1);		/* no transform */
	bits_lsb(&bt, 0, 1);		/* no colour cache */
	bits_lsb(&bt, 0, 1);		/* no meta prefix codes */
	for (k = 0; k < 5; k++)		/* green, red, blue, alpha, distance */
	{
		bits_lsb(&bt, 1, 1);	/* simple code */
		bits_lsb(&bt, 0, 1);	/* of one symbol */
		if (k == 3)
		{
			bits_lsb(&bt, 1, 1);	/* of 8 bits: alpha 255, opaque */
			bits_lsb(&bt, 255, 8);
		}
		else
		{
			bits_lsb(&bt, 0, 1);	/* of 1 bit: 0 (black) */
			bits_lsb(&bt, 0, 1);
		}
	}
	if (bt.n)
		put8(&bits, bt.acc);
	puts_(b, "VP8L");
	put32le(b, (unsigned long) bits.len);
	put(b, bits.d, bits.len);
	if (bits.len & 1)
		put8(b, 0);
	free(bits.d);
}

static void
make_webp(Buf *b, unsigned w, unsigned h, int extended)
{
	puts_(b, "RIFF");
	put32le(b, 0);
	puts_(b, "WEBP");
	if (extended)
	{
		puts_(b, "VP8X");
		put32le(b, 10);
		put32le(b, 0);			/* flags, reserved */
		put24le(b, w - 1);
		put24le(b, h - 1);
	}
	vp8l_chunk(b, w, h);
	set32le(b, 4, (unsigned long) b->len - 8);
}

/* VP8 (lossy): its frame header only */
static void
make_vp8_header(Buf *b, unsigned w, unsigned h, unsigned scale_bits)
{
	puts_(b, "RIFF");
	put32le(b, 4 + 8 + 10);
	puts_(b, "WEBP");
	puts_(b, "VP8 ");
	put32le(b, 10);
	put24le(b, (0u << 0) | (0u << 1) | (1u << 4) | (0u << 5));	/* key frame, shown */
	put(b, "\x9D\x01\x2A", 3);
	put16le(b, w | (scale_bits << 14));
	put16le(b, h | (scale_bits << 14));
}

/* ---- base64, the plain way ---- */

static char *
b64_encode(const uint8_t *p, size_t n, size_t *outlen)
{
	static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char	   *o = malloc((n + 2) / 3 * 4 + 1),
			   *q = o;
	size_t		i;

	for (i = 0; i + 2 < n; i += 3)
	{
		*q++ = al[p[i] >> 2];
		*q++ = al[((p[i] & 3) << 4) | (p[i + 1] >> 4)];
		*q++ = al[((p[i + 1] & 15) << 2) | (p[i + 2] >> 6)];
		*q++ = al[p[i + 2] & 63];
	}
	if (n - i == 1)
	{
		*q++ = al[p[i] >> 2];
		*q++ = al[(p[i] & 3) << 4];
		*q++ = '=';
		*q++ = '=';
	}
	else if (n - i == 2)
	{
		*q++ = al[p[i] >> 2];
		*q++ = al[((p[i] & 3) << 4) | (p[i + 1] >> 4)];
		*q++ = al[(p[i + 1] & 15) << 2];
		*q++ = '=';
	}
	*q = 0;
	*outlen = (size_t) (q - o);
	return o;
}

/* ---- the published examples ---- */

static void
CheckOpenAI(void)
{
	int			w,
				h;

	/* https://platform.openai.com/docs/guides/images-vision#calculating-costs */
	is(ImageTokensOpenAI(1024, 1024, IMAGE_DETAIL_HIGH), 765,
	   "OpenAI: 1024 x 1024 in high detail costs 765 tokens (published)");
	ImageOpenAITileSize(1024, 1024, &w, &h);
	ok(w == 768 && h == 768, "... scaled down to 768 x 768 (published)");
	is(ImageTokensOpenAI(2048, 4096, IMAGE_DETAIL_HIGH), 1105,
	   "OpenAI: 2048 x 4096 in high detail costs 1105 tokens (published)");
	ImageOpenAITileSize(2048, 4096, &w, &h);
	ok(w == 768 && h == 1536, "... through 1024 x 2048 to 768 x 1536 (published)");
	is(ImageTokensOpenAI(4096, 8192, IMAGE_DETAIL_LOW), 85,
	   "OpenAI: 4096 x 8192 in low detail costs 85 tokens (published)");
	is(ImageTokensOpenAI(1024, 1024, IMAGE_DETAIL_AUTO), 765,
	   "OpenAI: auto is counted as high (the larger)");
	is(ImageTokensOpenAI(128, 64, IMAGE_DETAIL_HIGH), 255,
	   "OpenAI: a small image is not enlarged to 768 (128 x 64: one tile, as billed)");
	is(ImageTokensOpenAI(2049, 513, IMAGE_DETAIL_HIGH), 1445,
	   "OpenAI: 2049 x 513 scales to 2048 x 513 (512.75 rounds up): 8 tiles, as billed");
	is(ImageTokensOpenAI(2050, 513, IMAGE_DETAIL_HIGH), 765,
	   "OpenAI: 2050 x 513 scales to 2048 x 512 (512.4995 rounds down): 4 tiles, as billed");
	is(ImageTokensOpenAI(513, 2049, IMAGE_DETAIL_HIGH), 1445,
	   "OpenAI: the same upright (513 x 2049)");
	is(ImageTokensOpenAITiles(1024, 1024, IMAGE_DETAIL_HIGH, 70, 140), 630,
	   "OpenAI: gpt-5's published prices (70, 140): 1024 x 1024 high is 70 + 4 x 140");
	is(ImageTokensOpenAITiles(1024, 1024, IMAGE_DETAIL_LOW, 2833, 5667), 2833,
	   "OpenAI: gpt-4o-mini's low detail is its base, 2833");
	is(ImageTokensOpenAI(IMAGE_SIZE_UNKNOWN, IMAGE_SIZE_UNKNOWN, IMAGE_DETAIL_HIGH), 85 + 8 * 170,
	   "OpenAI: an image of unknown size costs the most high detail can: 8 tiles");
	is(ImageTokensOpenAI(IMAGE_SIZE_UNKNOWN, 500, IMAGE_DETAIL_LOW), 85,
	   "OpenAI: ... and in low detail the base");
	is(ImageTokensOpenAI(768, 2048, IMAGE_DETAIL_HIGH), 85 + 8 * 170,
	   "OpenAI: that maximum is reached (768 x 2048)");

	/* patch models, same page */
	is(ImageOpenAIPatches(1024, 1024), 1024,
	   "OpenAI patches: 1024 x 1024 is 1024 tokens (published)");
	is(ImageOpenAIPatches(1800, 2400), 1452,
	   "OpenAI patches: 1800 x 2400 is 1452 tokens, 33 x 44 (published)");
	is(ImageOpenAIPatches(2400, 1800), 1452, "OpenAI patches: ... and 2400 x 1800");
	is(ImageTokensOpenAIPatches(1800, 2400, 1620), 2353,
	   "OpenAI patches: gpt-4.1-mini's 1.62 times 1452 (2352.24) rounds up to 2353");
	is(ImageTokensOpenAIPatches(1024, 1024, 2460), 2520,
	   "OpenAI patches: gpt-4.1-nano's 2.46 times 1024 is 2519.04, so 2520");
	is(ImageOpenAIPatches(1248, 1248), 1521, "OpenAI patches: 39 x 39 = 1521 patches fit the budget unscaled");
	is(ImageOpenAIPatches(1, 60000), 1536,
	   "OpenAI patches: a 1 x 60000 image, where the formula gives 0, counts the cap");
	is(ImageOpenAIPatches(IMAGE_SIZE_UNKNOWN, IMAGE_SIZE_UNKNOWN), 1536,
	   "OpenAI patches: an image of unknown size counts the cap, 1536");
	is(ImageTokensOpenAIPatches(-1, 7, 1720), 2642,
	   "OpenAI patches: ... times o4-mini's 1.72: 2641.92, so 2642");
}

static void
CheckAnthropic(void)
{
	/* https://platform.claude.com/docs/en/build-with-claude/vision, the table */
	static const struct
	{
		int			w,
					h;
		int			std_w,
					std_h,
					std_tokens;
		int			hi_w,
					hi_h,
					hi_tokens;
	}			table[] = {
		{200, 200, 200, 200, 64, 200, 200, 64},
		{1000, 1000, 1000, 1000, 1296, 1000, 1000, 1296},
		{1092, 1092, 1092, 1092, 1521, 1092, 1092, 1521},
		{1920, 1080, 1456, 819, 1560, 1920, 1080, 2691},
		/* the table prints 1269 x 952; the reference implementation gives 1270 */
		{2000, 1500, 1270, 952, 1564, 2000, 1500, 3888},
		{3840, 2160, 1456, 819, 1560, 2576, 1449, 4784},
	};
	/* sizes from Anthropic's Python reference implementation, run as published */
	static const struct
	{
		int			w,
					h;
		ImageAnthropicTier tier;
		int			rw,
					rh;
	}			reference[] = {
		{1075, 1520, IMAGE_ANTHROPIC_STANDARD, 924, 1307},	/* the docs' A4 page */
		{1075, 1520, IMAGE_ANTHROPIC_HIGH_RES, 1075, 1520},
		{6848, 1926, IMAGE_ANTHROPIC_HIGH_RES, 2576, 724},	/* ties to even */
		{5232, 3698, IMAGE_ANTHROPIC_STANDARD, 1308, 924},
		{1534, 2832, IMAGE_ANTHROPIC_STANDARD, 812, 1500},
		{7586, 6117, IMAGE_ANTHROPIC_STANDARD, 1215, 980},
		{7586, 6117, IMAGE_ANTHROPIC_HIGH_RES, 2153, 1736},
		{5544, 8238, IMAGE_ANTHROPIC_HIGH_RES, 1568, 2330},
		{3050, 106, IMAGE_ANTHROPIC_STANDARD, 1568, 54},
		{7406, 6924, IMAGE_ANTHROPIC_HIGH_RES, 1988, 1859},
		{1818, 2170, IMAGE_ANTHROPIC_HIGH_RES, 1759, 2100},
	};
	size_t		i;
	int			bad_size = 0,
				bad_tokens = 0,
				bad_ref = 0;

	for (i = 0; i < sizeof(table) / sizeof(table[0]); i++)
	{
		int			w,
					h;

		ImageAnthropicSize(table[i].w, table[i].h, IMAGE_ANTHROPIC_STANDARD, &w, &h);
		bad_size += (w != table[i].std_w || h != table[i].std_h);
		bad_tokens += ImageTokensAnthropic(table[i].w, table[i].h, IMAGE_ANTHROPIC_STANDARD) != table[i].std_tokens;
		ImageAnthropicSize(table[i].w, table[i].h, IMAGE_ANTHROPIC_HIGH_RES, &w, &h);
		bad_size += (w != table[i].hi_w || h != table[i].hi_h);
		bad_tokens += ImageTokensAnthropic(table[i].w, table[i].h, IMAGE_ANTHROPIC_HIGH_RES) != table[i].hi_tokens;
	}
	ok(bad_tokens == 0, "Anthropic: the published table's tokens, both tiers (6 sizes x 2)");
	ok(bad_size == 0, "Anthropic: the published table's resized sizes (but 1270 x 952 for 1269 x 952)");
	for (i = 0; i < sizeof(reference) / sizeof(reference[0]); i++)
	{
		int			w,
					h;

		ImageAnthropicSize(reference[i].w, reference[i].h, reference[i].tier, &w, &h);
		if (w != reference[i].rw || h != reference[i].rh)
		{
			bad_ref++;
			printf("#   %dx%d: got %dx%d, want %dx%d\n", reference[i].w, reference[i].h,
				   w, h, reference[i].rw, reference[i].rh);
		}
	}
	ok(bad_ref == 0, "Anthropic: the reference implementation's sizes, the A4 example and exact .5 ties among them");
	is(ImageTokensAnthropic(1075, 1520, IMAGE_ANTHROPIC_HIGH_RES), 2145,
	   "Anthropic: the A4 page costs 39 x 55 = 2145 on the high-resolution tier (published)");
	is(ImageTokensAnthropic(IMAGE_SIZE_UNKNOWN, IMAGE_SIZE_UNKNOWN, IMAGE_ANTHROPIC_STANDARD), 1568,
	   "Anthropic: an image of unknown size costs the standard tier's budget, 1568");
	is(ImageTokensAnthropic(0, 10, IMAGE_ANTHROPIC_HIGH_RES), 4784,
	   "Anthropic: ... and the high-resolution tier's, 4784");
	is(ImageTokensAnthropic(1568, 784, IMAGE_ANTHROPIC_STANDARD), 1568,
	   "Anthropic: the budget is reached (1568 x 784)");
	is(ImageTokensAnthropic(1, 1, IMAGE_ANTHROPIC_STANDARD), 1, "Anthropic: a 1 x 1 image is one patch");
	is(ImageTokensAnthropic(65535, 1, IMAGE_ANTHROPIC_STANDARD), 56,
	   "Anthropic: 65535 x 1 shrinks to the 1568 edge: 56 patches");
}

/* ---- the formats ---- */

static void
write_sample(const char *dir, const char *name, const Buf *b)
{
	char		path[4096];
	FILE	   *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (f == NULL || fwrite(b->d, 1, b->len, f) != b->len || fclose(f) != 0)
	{
		perror(path);
		exit(2);
	}
}

/* the size read, raw and from base64 */
static int
sized(const Buf *b, ImageFormat format, uint32_t w, uint32_t h, size_t header_bytes)
{
	ImageInfo	raw,
				dec;
	size_t		n;
	char	   *t = b64_encode(b->d, b->len, &n);
	ImageError	e1 = ImageDimensions(b->d, b->len, &raw),
				e2 = ImageBase64Dimensions(t, n, &dec);
	int			good = e1 == IMAGE_OK && e2 == IMAGE_OK &&
		raw.format == format && raw.width == w && raw.height == h &&
		dec.format == format && dec.width == w && dec.height == h &&
		(header_bytes == 0 || (raw.header_bytes == header_bytes && dec.header_bytes == header_bytes));

	if (!good)
		printf("#   want %ux%u: raw %d %s %ux%u (%zu bytes read), base64 %d %s %ux%u (%zu)\n",
			   w, h, e1, raw.detail ? raw.detail : "", raw.width, raw.height, raw.header_bytes,
			   e2, dec.detail ? dec.detail : "", dec.width, dec.height, dec.header_bytes);
	free(t);
	return good;
}

static const uint32_t sizes[][2] = {
	{1, 1}, {3, 5}, {5, 3}, {17, 300}, {640, 480}, {1, 2000}, {2000, 1},
};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static void
CheckFormats(const char *dir)
{
	size_t		i;
	int			bad;
	Buf			b = {0};
	JpegOpts	plain = {0xC0, 0, 0, 0};

	for (bad = 0, i = 0, b.len = 0; i < NSIZES; i++, b.len = 0)
	{
		make_png(&b, sizes[i][0], sizes[i][1]);
		bad += !sized(&b, IMAGE_FORMAT_PNG, sizes[i][0], sizes[i][1], 33);
	}
	ok(bad == 0, "PNG: the size from IHDR, raw and base64, 7 sizes (33 bytes read)");
	b.len = 0;
	make_png(&b, 65535, 3);
	ok(sized(&b, IMAGE_FORMAT_PNG, 65535, 3, 33), "PNG: 65535 pixels wide, the largest accepted");

	for (bad = 0, i = 0, b.len = 0; i < NSIZES; i++, b.len = 0)
	{
		make_gif(&b, sizes[i][0], sizes[i][1], sizes[i][0], sizes[i][1]);
		bad += !sized(&b, IMAGE_FORMAT_GIF, sizes[i][0], sizes[i][1], 13);
	}
	ok(bad == 0, "GIF: the size from the logical screen, raw and base64, 7 sizes (13 bytes read)");
	b.len = 0;
	make_gif(&b, 4, 4, 300, 200);
	ok(sized(&b, IMAGE_FORMAT_GIF, 300, 200, 13), "GIF: the logical screen, not the first frame's size");
	b.len = 0;
	make_gif(&b, 1, 1, 1, 1);
	b.d[4] = '7';				/* GIF87a: its header is the same */
	ok(sized(&b, IMAGE_FORMAT_GIF, 1, 1, 13), "GIF: version 87a");

	for (bad = 0, i = 0, b.len = 0; i < NSIZES; i++, b.len = 0)
	{
		make_jpeg(&b, sizes[i][0], sizes[i][1], plain);
		bad += !sized(&b, IMAGE_FORMAT_JPEG, sizes[i][0], sizes[i][1], 0);
	}
	ok(bad == 0, "JPEG: the size from the baseline frame header, raw and base64, 7 sizes");
	{
		static const unsigned sofs[] = {0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF};
		JpegOpts	o = plain;

		for (bad = 0, i = 0, b.len = 0; i < sizeof(sofs) / sizeof(sofs[0]); i++, b.len = 0)
		{
			o.sof = sofs[i];
			make_jpeg(&b, 123, 45, o);
			bad += !sized(&b, IMAGE_FORMAT_JPEG, 123, 45, 0);
		}
		ok(bad == 0, "JPEG: every other frame header (SOF1-3, 5-7, 9-11, 13-15)");
	}
	{
		JpegOpts	o = {0xC0, 1, 1, 1};

		make_jpeg(&b, 321, 77, o);
		ok(b.len > 60000 && sized(&b, IMAGE_FORMAT_JPEG, 321, 77, 0),
		   "JPEG: skips a 60000-byte Exif segment holding a thumbnail's frame header, fill bytes and RST0");
		{
			ImageInfo	info;
			size_t		n;
			char	   *t = b64_encode(b.d, b.len, &n);

			ImageBase64Dimensions(t, n, &info);
			ok(info.header_bytes < 64,
			   "JPEG: ... decoding under 64 of its 60000+ bytes from base64: the skipped segments are not decoded");
			if (info.header_bytes >= 64)
				printf("#   %zu bytes decoded\n", info.header_bytes);
			free(t);
		}
		if (dir)
			write_sample(dir, "exif.jpg", &b);
		b.len = 0;
	}
	b.len = 0;
	make_jpeg(&b, 65535, 65535, plain);
	ok(sized(&b, IMAGE_FORMAT_JPEG, 65535, 65535, 0), "JPEG: 65535 x 65535, the format's largest");

	for (bad = 0, i = 0, b.len = 0; i < NSIZES; i++, b.len = 0)
	{
		make_webp(&b, sizes[i][0], sizes[i][1], 0);
		bad += !sized(&b, IMAGE_FORMAT_WEBP, sizes[i][0], sizes[i][1], 25);
	}
	ok(bad == 0, "WebP lossless (VP8L): the size, raw and base64, 7 sizes (25 bytes read)");
	make_webp(&b, 16384, 16384, 0);
	ok(sized(&b, IMAGE_FORMAT_WEBP, 16384, 16384, 25), "WebP lossless: 16384 x 16384, the format's largest");
	for (bad = 0, i = 0, b.len = 0; i < NSIZES; i++, b.len = 0)
	{
		make_webp(&b, sizes[i][0], sizes[i][1], 1);
		bad += !sized(&b, IMAGE_FORMAT_WEBP, sizes[i][0], sizes[i][1], 30);
	}
	ok(bad == 0, "WebP extended (VP8X): the canvas size, raw and base64, 7 sizes (30 bytes read)");
	for (bad = 0, i = 0, b.len = 0; i < NSIZES; i++, b.len = 0)
	{
		make_vp8_header(&b, sizes[i][0], sizes[i][1], 0);
		bad += !sized(&b, IMAGE_FORMAT_WEBP, sizes[i][0], sizes[i][1], 30);
	}
	ok(bad == 0, "WebP lossy (VP8 frame header): the size, 7 sizes (30 bytes read)");
	make_vp8_header(&b, 16383, 9, 3);
	ok(sized(&b, IMAGE_FORMAT_WEBP, 16383, 9, 30), "WebP lossy: the 2 scaling bits are not part of the size");
	b.len = 0;

	if (dir)
	{
		JpegOpts	o = plain;

		make_png(&b, 3, 5);
		write_sample(dir, "3x5.png", &b);
		b.len = 0;
		make_gif(&b, 17, 300, 17, 300);
		write_sample(dir, "17x300.gif", &b);
		b.len = 0;
		make_jpeg(&b, 640, 480, o);
		write_sample(dir, "640x480.jpg", &b);
		b.len = 0;
		make_webp(&b, 640, 480, 0);
		write_sample(dir, "640x480.webp", &b);
		b.len = 0;
		make_webp(&b, 5, 3, 1);
		write_sample(dir, "5x3-extended.webp", &b);
		b.len = 0;
	}
	free(b.d);
}

/* ---- malformed data ---- */

static ImageError
dims(const Buf *b, ImageInfo *info)
{
	return ImageDimensions(b->d, b->len, info);
}

/* every proper prefix of the header: truncated (or, too short for the magic, the same) */
static int
truncations(const Buf *b, size_t header, ImageFormat format)
{
	size_t		n;
	int			bad = 0;

	for (n = 1; n < header; n++)
	{
		ImageInfo	info;
		ImageError	e = ImageDimensions(b->d, n, &info);

		if (e != IMAGE_ERR_TRUNCATED || info.format != format || info.detail == NULL)
		{
			bad++;
			if (bad < 4)
				printf("#   %zu bytes: %d (%s)\n", n, e, info.detail ? info.detail : "");
		}
	}
	return bad;
}

static void
fix_png_crc(Buf *b)
{
	uint32_t	c = crc32_table(b->d + 12, 17);

	b->d[29] = c >> 24;
	b->d[30] = c >> 16;
	b->d[31] = c >> 8;
	b->d[32] = c;
}

static void
CheckMalformed(void)
{
	Buf			b = {0};
	ImageInfo	info;
	JpegOpts	plain = {0xC0, 0, 0, 0};
	size_t		sof;

	is(ImageDimensions((const uint8_t *) "", 0, &info), IMAGE_ERR_TRUNCATED, "empty data: truncated");
	is(ImageDimensions((const uint8_t *) "hello, world", 12, &info), IMAGE_ERR_FORMAT,
	   "text: not an image format");
	ok(info.detail != NULL && info.detail[strlen(info.detail) - 1] == '.', "... with a detail sentence");
	is(ImageDimensions((const uint8_t *) "BM\x36\0\0\0\0\0\0\0\x36\0\0\0", 14, &info), IMAGE_ERR_FORMAT,
	   "a BMP file: not a format the providers take");
	is(ImageDimensions((const uint8_t *) "RIFF\x04\0\0\0WAVEfmt ", 16, &info), IMAGE_ERR_FORMAT,
	   "a RIFF file that is not WebP (WAVE): not an image format");

	/* PNG */
	make_png(&b, 3, 5);
	is(truncations(&b, 33, IMAGE_FORMAT_PNG), 0, "PNG cut anywhere in its first 33 bytes: truncated");
	b.d[29] ^= 1;
	is(dims(&b, &info), IMAGE_ERR_MALFORMED, "PNG with a wrong IHDR checksum: malformed");
	b.d[29] ^= 1;
	b.d[11] = 14;
	is(dims(&b, &info), IMAGE_ERR_MALFORMED, "PNG whose IHDR says 14 bytes: malformed");
	b.d[11] = 13;
	memcpy(b.d + 12, "IDAT", 4);
	is(dims(&b, &info), IMAGE_ERR_MALFORMED, "PNG whose first chunk is not IHDR: malformed");
	memcpy(b.d + 12, "IHDR", 4);
	memset(b.d + 16, 0, 4);
	fix_png_crc(&b);
	is(dims(&b, &info), IMAGE_ERR_ZERO_SIZE, "PNG 0 pixels wide: zero size");
	memcpy(b.d + 16, "\x00\x01\x00\x00", 4);	/* 65536 */
	fix_png_crc(&b);
	is(dims(&b, &info), IMAGE_ERR_TOO_LARGE, "PNG 65536 pixels wide: too large");
	memcpy(b.d + 16, "\x80\x00\x00\x00", 4);
	fix_png_crc(&b);
	is(dims(&b, &info), IMAGE_ERR_MALFORMED, "PNG 2^31 pixels wide (over the format's limit): malformed");
	ok(info.offset == 16, "... found at byte 16");
	b.len = 0;

	/* GIF */
	make_gif(&b, 3, 5, 3, 5);
	is(truncations(&b, 13, IMAGE_FORMAT_GIF), 0, "GIF cut anywhere in its first 13 bytes: truncated");
	b.d[4] = '8';
	is(dims(&b, &info), IMAGE_ERR_MALFORMED, "GIF88a: malformed");
	b.d[4] = '9';
	b.d[8] = b.d[9] = 0;
	is(dims(&b, &info), IMAGE_ERR_ZERO_SIZE, "GIF 0 pixels high: zero size");
	b.len = 0;

	/* JPEG */
	make_jpeg(&b, 3, 5, plain);
	for (sof = 2; !(b.d[sof] == 0xFF && b.d[sof + 1] == 0xC0); sof++)
		;
	is(truncations(&b, sof + 10, IMAGE_FORMAT_JPEG), 0,
	   "JPEG cut anywhere before the end of its frame header: truncated");
	b.d[sof + 5] = b.d[sof + 6] = 0;
	is(dims(&b, &info), IMAGE_ERR_ZERO_SIZE, "JPEG 0 lines high (DNL): zero size");
	ok(strstr(info.detail, "DNL") != NULL, "... saying why");
	b.d[sof + 6] = 5;
	b.d[sof + 7] = b.d[sof + 8] = 0;
	is(dims(&b, &info), IMAGE_ERR_ZERO_SIZE, "JPEG 0 pixels wide: zero size");
	b.d[sof + 8] = 3;
	b.d[sof + 3] = 12;
	is(dims(&b, &info), IMAGE_ERR_MALFORMED, "JPEG frame header whose length does not fit its components: malformed");
	b.d[sof + 3] = 11;
	b.d[sof + 1] = 0xDA;
	is(dims(&b, &info), IMAGE_ERR_MALFORMED, "JPEG with a scan (SOS) and no frame header before it: malformed");
	b.d[sof + 1] = 0xD9;
	is(dims(&b, &info), IMAGE_ERR_MALFORMED, "JPEG ending (EOI) before a frame header: malformed");
	b.d[sof + 1] = 0xD8;
	is(dims(&b, &info), IMAGE_ERR_MALFORMED, "JPEG with a second SOI: malformed");
	b.d[sof + 1] = 0xC0;
	b.d[sof] = 0x00;
	is(dims(&b, &info), IMAGE_ERR_MALFORMED, "JPEG with a data byte where a marker belongs: malformed");
	ok(info.offset == sof, "... found at that byte");
	b.d[sof] = 0xFF;
	b.d[4] = 0;
	b.d[5] = 1;					/* APP0 of length 1 */
	is(dims(&b, &info), IMAGE_ERR_MALFORMED, "JPEG segment of length 1: malformed");
	b.d[5] = 0xFF;				/* APP0 of length 255: runs past the end */
	b.len = 100;
	is(dims(&b, &info), IMAGE_ERR_TRUNCATED, "JPEG segment running past the data: truncated");
	ok(info.offset == 2, "... found at that segment's marker");
	b.len = 0;

	/* WebP */
	make_webp(&b, 3, 5, 0);
	is(truncations(&b, 25, IMAGE_FORMAT_WEBP), 0, "WebP (VP8L) cut anywhere in its first 25 bytes: truncated");
	b.d[20] = 0x2E;
	is(dims(&b, &info), IMAGE_ERR_MALFORMED, "VP8L without its signature byte: malformed");
	b.d[20] = 0x2F;
	b.d[24] |= 0x20;			/* version 1 */
	is(dims(&b, &info), IMAGE_ERR_MALFORMED, "VP8L of version 1: malformed");
	b.d[24] &= ~0x20;
	memcpy(b.d + 12, "ALPH", 4);
	is(dims(&b, &info), IMAGE_ERR_MALFORMED, "WebP whose first chunk is ALPH: malformed");
	memcpy(b.d + 12, "VP8L", 4);
	set32le(&b, 4, (unsigned long) b.len - 8 + 2);
	is(dims(&b, &info), IMAGE_ERR_TRUNCATED, "WebP shorter than its RIFF size: truncated");
	set32le(&b, 4, (unsigned long) b.len - 8 - 1);
	is(dims(&b, &info), IMAGE_ERR_MALFORMED, "WebP with an odd RIFF size: malformed");
	b.len = 0;
	make_webp(&b, 3, 5, 1);
	is(truncations(&b, 30, IMAGE_FORMAT_WEBP), 0, "WebP (VP8X) cut anywhere in its first 30 bytes: truncated");
	b.d[24] = 0x6F;
	b.d[25] = 0x11;
	b.d[26] = 0x01;				/* 70000 - 1 */
	is(dims(&b, &info), IMAGE_ERR_TOO_LARGE, "VP8X canvas 70000 pixels wide: too large");
	memset(b.d + 24, 0xFF, 6);	/* 2^24 x 2^24 */
	is(dims(&b, &info), IMAGE_ERR_MALFORMED, "VP8X canvas of 2^48 pixels (over 2^32 - 1): malformed");
	b.len = 0;
	make_vp8_header(&b, 3, 5, 0);
	is(truncations(&b, 30, IMAGE_FORMAT_WEBP), 0, "WebP (VP8) cut anywhere in its first 30 bytes: truncated");
	b.d[23] = 0x9C;
	is(dims(&b, &info), IMAGE_ERR_MALFORMED, "VP8 without its start code: malformed");
	b.d[23] = 0x9D;
	b.d[20] |= 1;
	is(dims(&b, &info), IMAGE_ERR_MALFORMED, "VP8 interframe: malformed");
	b.d[20] &= ~1;
	b.d[26] = b.d[27] = 0;
	is(dims(&b, &info), IMAGE_ERR_ZERO_SIZE, "VP8 0 pixels wide: zero size");
	free(b.d);
}

static void
CheckBase64(void)
{
	ImageInfo	info;
	size_t		n;
	Buf			b = {0};
	char	   *t;
	size_t		len;
	int			bad = 0;

	for (len = 0; len < 40; len++)
	{
		uint8_t		bytes[40];
		size_t		i;

		for (i = 0; i < len; i++)
			bytes[i] = (uint8_t) Rand();
		t = b64_encode(bytes, len, &n);
		if (ImageBase64Check(t, n, &i, &info) != IMAGE_OK || i != len)
			bad++;
		free(t);
	}
	ok(bad == 0, "base64: every length 0-39 checks and gives its decoded length");
	is(ImageBase64Check("QQ==", 4, &n, &info), IMAGE_OK, "base64: \"QQ==\" is one byte");
	is(ImageBase64Check("QR==", 4, &n, &info), IMAGE_ERR_BASE64, "base64: \"QR==\" has bits after its byte: refused");
	ok(info.offset == 1, "... at character 1");
	is(ImageBase64Check("QUJ=", 4, &n, &info), IMAGE_ERR_BASE64, "base64: \"QUJ=\" has bits after its bytes: refused");
	is(ImageBase64Check("QUI=", 4, &n, &info), IMAGE_OK, "base64: \"QUI=\" is two bytes");
	is(ImageBase64Check("QUJD", 3, &n, &info), IMAGE_ERR_BASE64, "base64: a length not a multiple of 4: refused");
	is(ImageBase64Check("QQ", 2, &n, &info), IMAGE_ERR_BASE64, "base64: unpadded: refused");
	is(ImageBase64Check("Q===", 4, &n, &info), IMAGE_ERR_BASE64, "base64: three '=': refused");
	is(ImageBase64Check("QQ==QUJD", 8, &n, &info), IMAGE_ERR_BASE64, "base64: '=' before the end: refused");
	ok(info.offset == 2, "... at character 2");
	is(ImageBase64Check("QU JD", 4, &n, &info), IMAGE_ERR_BASE64, "base64: a space: refused");
	is(ImageBase64Check("QUJD\nQUJD", 9, &n, &info), IMAGE_ERR_BASE64, "base64: a line break: refused");
	is(ImageBase64Check("QU-_", 4, &n, &info), IMAGE_ERR_BASE64, "base64: the URL-safe alphabet: refused");
	is(ImageBase64Check("QU\0D", 4, &n, &info), IMAGE_ERR_BASE64, "base64: a NUL byte: refused");
	is(ImageBase64Check("QU\xC3\xA9", 4, &n, &info), IMAGE_ERR_BASE64, "base64: a non-ASCII byte: refused");

	/* the whole text is checked, not only what the header needs */
	make_png(&b, 7, 9);
	t = b64_encode(b.d, b.len, &n);
	t[n - 8] = '*';
	is(ImageBase64Dimensions(t, n, &info), IMAGE_ERR_BASE64,
	   "base64: a bad character far after the PNG header is still refused");
	ok(info.offset == n - 8, "... at its offset");
	t[n - 8] = 'A';
	is(ImageBase64Dimensions(t, n - 1, &info), IMAGE_ERR_BASE64, "base64: the PNG's text cut by a character is refused");
	is(ImageBase64Dimensions(t, 40, &info), IMAGE_ERR_TRUNCATED,
	   "base64: its first 40 characters (30 bytes) are a truncated PNG");
	is(ImageBase64Dimensions("", 0, &info), IMAGE_ERR_TRUNCATED, "base64: empty text is an empty image: truncated");
	free(t);
	free(b.d);
}

static void
CheckDataUrl(void)
{
	const char *mt,
			   *data;
	size_t		mtl,
				dl;
	ImageInfo	info;
	const char *u1 = "data:image/png;base64,iVBORw0KGgo=";
	const char *u2 = "DATA:Image/JPEG;name=x.jpg;BASE64,/9j/";
	const char *u3 = "data:image/png,%89PNG";

	ok(ImageDataUrl(u1, strlen(u1), &mt, &mtl, &data, &dl, &info) == IMAGE_OK &&
	   mtl == 9 && memcmp(mt, "image/png", 9) == 0 && dl == 12 && memcmp(data, "iVBORw0KGgo=", 12) == 0,
	   "data URL: media type and base64 text");
	ok(ImageDataUrl(u2, strlen(u2), &mt, &mtl, &data, &dl, &info) == IMAGE_OK &&
	   mtl == 10 && memcmp(mt, "Image/JPEG", 10) == 0 && dl == 4,
	   "data URL: scheme and \";base64\" in any case, parameters skipped");
	is(ImageDataUrl(u3, strlen(u3), &mt, &mtl, &data, &dl, &info), IMAGE_ERR_DATA_URL,
	   "data URL not in base64: refused");
	is(ImageDataUrl("data:image/png;base64", 21, &mt, &mtl, &data, &dl, &info), IMAGE_ERR_DATA_URL,
	   "data URL without a comma: refused");
	ok(!ImageIsDataUrl("https://example.com/a.png", 25) && ImageIsDataUrl("Data:", 5) && !ImageIsDataUrl("dat", 3),
	   "data URL: told from other URLs by its scheme");
	{
		ImageDetail d;

		ok(ImageDetailParse("low", 3, &d) && d == IMAGE_DETAIL_LOW &&
		   ImageDetailParse("high", 4, &d) && d == IMAGE_DETAIL_HIGH &&
		   ImageDetailParse("auto", 4, &d) && d == IMAGE_DETAIL_AUTO &&
		   !ImageDetailParse("HIGH", 4, &d) && !ImageDetailParse("hig", 3, &d),
		   "detail: low, high and auto, nothing else");
	}
	ok(strcmp(ImageFormatMediaType(IMAGE_FORMAT_JPEG), "image/jpeg") == 0 &&
	   strcmp(ImageFormatMediaType(IMAGE_FORMAT_WEBP), "image/webp") == 0 &&
	   ImageFormatMediaType(IMAGE_FORMAT_UNKNOWN) == NULL,
	   "media types of the formats, to compare with the one a message gives");
	{
		int			e,
					bad = 0;

		for (e = IMAGE_OK; e <= IMAGE_ERR_DATA_URL; e++)
		{
			const char *m = ImageErrorMessage((ImageError) e);

			if (m[0] < 'a' || m[0] > 'z' || m[strlen(m) - 1] == '.')
				bad++;
		}
		ok(bad == 0, "error messages: lower case, no final period");
	}
}

/* ---- the rules against brute-force references ---- */

/* the tile rule as the text reads, in doubles, tiles counted one by one */
static long long
ReferenceTiles(int w0, int h0)
{
	double		w = w0,
				h = h0;
	double		x,
				y;
	long long	tiles = 0;

	/* one rounding per quotient: an exact .5 stays exact */
	if (w > 2048 || h > 2048)
	{
		if (w >= h)
		{
			h = floor(h * 2048.0 / w + 0.5);
			w = 2048;
		}
		else
		{
			w = floor(w * 2048.0 / h + 0.5);
			h = 2048;
		}
		if (w < 1)
			w = 1;
		if (h < 1)
			h = 1;
	}
	if ((w < h ? w : h) > 768)
	{
		if (w <= h)
		{
			h = floor(h * 768.0 / w + 0.5);
			w = 768;
		}
		else
		{
			w = floor(w * 768.0 / h + 0.5);
			h = 768;
		}
	}
	for (y = 0; y < h; y += 512)
		for (x = 0; x < w; x += 512)
			tiles++;
	return 85 + 170 * tiles;
}

/* the patch rule's published steps, in long double (exact to 1e-12 here) */
static long long
ReferencePatches(int w0, int h0)
{
	long double w = w0,
				h = h0,
				r,
				rw,
				rh;
	long long	p;

	p = (long long) ceill(w / 32) * (long long) ceill(h / 32);
	if (p <= 1536)
		return p;
	r = sqrtl(32.0L * 32.0L * 1536.0L / (w * h));
	rw = floorl(w * r / 32 + 1e-12L) / (w * r / 32);
	rh = floorl(h * r / 32 + 1e-12L) / (h * r / 32);
	r *= rw < rh ? rw : rh;
	if (r <= 0)
		return 1536;
	p = (long long) ceill(w * r / 32 - 1e-12L) * (long long) ceill(h * r / 32 - 1e-12L);
	return p < 1536 ? p : 1536;
}

/* Anthropic's rule by a linear scan down from the long edge */
static void
ReferenceAnthropic(int w, int h, int max_edge, int max_tokens, int *rw, int *rh)
{
#define FITS(a, b) (((a) + 27) / 28 * 28 <= max_edge && ((b) + 27) / 28 * 28 <= max_edge && \
					(long long) (((a) + 27) / 28) * (((b) + 27) / 28) <= max_tokens)
	double		aspect;
	int			m;

	if (FITS(w, h))
	{
		*rw = w;
		*rh = h;
		return;
	}
	if (h > w)
	{
		ReferenceAnthropic(h, w, max_edge, max_tokens, rh, rw);
		return;
	}
	aspect = (double) w / h;
	for (m = w - 1; m > 1; m--)
	{
		int			s = (int) nearbyint(m / aspect);

		if (s < 1)
			s = 1;
		if (FITS(m, s))
			break;
	}
	*rw = m;
	*rh = (int) nearbyint(m / aspect) < 1 ? 1 : (int) nearbyint(m / aspect);
#undef FITS
}

/* a size: small, around the thresholds, large, or very elongated */
static void
RandomSize(int c, int *w, int *h)
{
	switch (c % 5)
	{
		case 0:
			*w = RandIn(1, 800);
			*h = RandIn(1, 800);
			break;
		case 1:
			*w = RandIn(700, 2200);
			*h = RandIn(700, 2200);
			break;
		case 2:
			*w = RandIn(1, 12000);
			*h = RandIn(1, 12000);
			break;
		case 3:
			*w = RandIn(1, 65535);
			*h = RandIn(1, 40);
			break;
		default:
			*w = RandIn(1500, 65535);
			*h = RandIn(1500, 65535);
			break;
	}
	if (Rand() & 1)
	{
		int			t = *w;

		*w = *h;
		*h = t;
	}
}

static void
CheckRules(int cases)
{
	int			bad_tiles = 0,
				bad_patches = 0,
				bad_anth = 0,
				over = 0,
				bad_limits = 0,
				bad_sym = 0,
				c;
	long long	max_tiles = 0,
				max_patches = 0,
				max_std = 0,
				max_hi = 0;

	for (c = 0; c < cases; c++)
	{
		int			w,
					h,
					rw,
					rh,
					ew,
					eh,
					t;
		long long	got;

		RandomSize(c, &w, &h);
		got = ImageTokensOpenAI(w, h, IMAGE_DETAIL_HIGH);
		if (got != ReferenceTiles(w, h))
		{
			if (bad_tiles++ < 3)
				printf("#   tiles %dx%d: %lld, reference %lld\n", w, h, got, ReferenceTiles(w, h));
		}
		bad_sym += got != ImageTokensOpenAI(h, w, IMAGE_DETAIL_AUTO);
		if (got > max_tiles)
			max_tiles = got;
		got = ImageOpenAIPatches(w, h);
		if (got != ReferencePatches(w, h))
		{
			if (bad_patches++ < 3)
				printf("#   patches %dx%d: %lld, reference %lld\n", w, h, got, ReferencePatches(w, h));
		}
		bad_sym += got != ImageOpenAIPatches(h, w);
		if (got > max_patches)
			max_patches = got;
		if (w > 12000 || h > 12000)
			continue;			/* the linear scan is slow there */
		for (t = 0; t < 2; t++)
		{
			ImageAnthropicTier tier = t ? IMAGE_ANTHROPIC_HIGH_RES : IMAGE_ANTHROPIC_STANDARD;
			int			edge = t ? 2576 : 1568,
						budget = t ? 4784 : 1568;

			ImageAnthropicSize(w, h, tier, &rw, &rh);
			ReferenceAnthropic(w, h, edge, budget, &ew, &eh);
			if (rw != ew || rh != eh)
			{
				if (bad_anth++ < 3)
					printf("#   anthropic %dx%d tier %d: %dx%d, reference %dx%d\n", w, h, t, rw, rh, ew, eh);
			}
			got = ImageTokensAnthropic(w, h, tier);
			if (rw > edge || rh > edge || got > budget || rw > w || rh > h ||
				((w <= edge && h <= edge && (long long) ((w + 27) / 28) * ((h + 27) / 28) <= budget) &&
				 (rw != w || rh != h)))
				bad_limits++;
			if (t == 0 && got > max_std)
				max_std = got;
			if (t == 1 && got > max_hi)
				max_hi = got;
		}
	}
	printf("# %d generated sizes\n", cases);
	ok(bad_tiles == 0, "OpenAI tiles: the same count as the rule computed in doubles, tile by tile");
	ok(bad_patches == 0, "OpenAI patches: the same count as the published steps in long double");
	ok(bad_anth == 0, "Anthropic: the same size as the largest fitting one found by a linear scan");
	ok(bad_limits == 0, "Anthropic: within the tier's edge and budget, never enlarged, unchanged when it fits");
	ok(bad_sym == 0, "every rule costs an image and its transpose the same (EXIF rotation does not matter)");
	over += max_tiles > ImageTokensOpenAI(IMAGE_SIZE_UNKNOWN, 0, IMAGE_DETAIL_HIGH);
	over += max_patches > ImageOpenAIPatches(IMAGE_SIZE_UNKNOWN, 0);
	over += max_std > ImageTokensAnthropic(IMAGE_SIZE_UNKNOWN, 0, IMAGE_ANTHROPIC_STANDARD);
	over += max_hi > ImageTokensAnthropic(IMAGE_SIZE_UNKNOWN, 0, IMAGE_ANTHROPIC_HIGH_RES);
	ok(over == 0, "no size costs more than the count for an unknown size, under every rule");
	printf("# largest seen: tiles %lld, patches %lld, Anthropic %lld / %lld\n",
		   max_tiles, max_patches, max_std, max_hi);
}

/*
 * The parsers on damaged images: each sample with a few bytes of its header
 * changed, or cut short, read raw and from base64.  Both ways must agree
 * (the same answer, size and bytes read: decoding on demand changes
 * nothing), every error has its sentence and a place inside the data, and
 * every size found is within bounds.  Run under a sanitizer, this is also a
 * check that no read goes past the data.
 */
static void
CheckDamaged(int cases)
{
	Buf			samples[6] = {{0}};
	JpegOpts	o = {0xC0, 0, 1, 1};
	int			disagree = 0,
				bad_error = 0,
				bad_size = 0,
				found_ok = 0,
				c;

	make_png(&samples[0], 37, 11);
	make_gif(&samples[1], 11, 37, 11, 37);
	make_jpeg(&samples[2], 300, 200, o);
	make_webp(&samples[3], 200, 300, 0);
	make_webp(&samples[4], 13, 7, 1);
	make_vp8_header(&samples[5], 640, 480, 0);
	for (c = 0; c < cases; c++)
	{
		const Buf  *s = &samples[c % 6];
		uint8_t    *d = malloc(s->len);
		size_t		len = s->len,
					n;
		int			k,
					changes = RandIn(1, 4);
		char	   *t;
		ImageInfo	raw,
					dec;
		ImageError	e1,
					e2;

		memcpy(d, s->d, len);
		for (k = 0; k < changes; k++)
		{
			size_t		at = (size_t) RandIn(0, (int) (len < 48 ? len - 1 : 47));

			d[at] = (Rand() & 3) ? (uint8_t) Rand() : (uint8_t) (d[at] ^ (1u << RandIn(0, 7)));
		}
		if (Rand() % 3 == 0)
			len = (size_t) RandIn(0, (int) len);
		t = b64_encode(d, len, &n);
		e1 = ImageDimensions(d, len, &raw);
		e2 = ImageBase64Dimensions(t, n, &dec);
		if (e1 != e2 || raw.width != dec.width || raw.height != dec.height ||
			raw.format != dec.format || raw.header_bytes != dec.header_bytes)
			disagree++;
		if (e1 != IMAGE_OK && (e1 > IMAGE_ERR_DATA_URL || raw.detail == NULL || raw.offset > len))
		{
			if (bad_error++ < 3)
				printf("#   error %d at %zu of %zu: %s\n", e1, raw.offset, len, raw.detail ? raw.detail : "(none)");
		}
		if (e1 == IMAGE_OK)
		{
			found_ok++;
			if (raw.width < 1 || raw.height < 1 || raw.width > IMAGE_MAX_SIDE || raw.height > IMAGE_MAX_SIDE)
				bad_size++;
		}
		free(t);
		free(d);
	}
	for (c = 0; c < 6; c++)
		free(samples[c].d);
	printf("# %d damaged images, %d of them still sized\n", cases, found_ok);
	ok(disagree == 0, "damaged images: read raw and from base64, the same answer, size and bytes read");
	ok(bad_error == 0, "damaged images: every error is a known code, with a sentence and a place in the data");
	ok(bad_size == 0 && found_ok > 0, "damaged images: every size found is between 1 and 65535");
}

int
main(int argc, char **argv)
{
	const char *dir = NULL;
	int			cases = 20000;

	if (argc > 2 && strcmp(argv[1], "--write") == 0)
	{
		dir = argv[2];
		mkdir(dir, 0777);
	}
	else if (argc > 1)
		cases = atoi(argv[1]);
	CheckOpenAI();
	CheckAnthropic();
	CheckFormats(dir);
	CheckMalformed();
	CheckBase64();
	CheckDataUrl();
	CheckRules(cases);
	CheckDamaged(cases);
	printf("1..%d\n", test_no);
	return failures ? 1 : 0;
}
