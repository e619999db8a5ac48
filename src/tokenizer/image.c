/*
 * image.c
 *		Images in chat messages: their size from the file header, and their
 *		token cost by each provider's published rule (see image.h).
 *
 * The rules, where they are published, and what this file decides where
 * the publication is silent:
 *
 * OpenAI, "Images and vision", Calculating costs:
 *   https://platform.openai.com/docs/guides/images-vision#calculating-costs
 *   (formerly https://platform.openai.com/docs/guides/vision#calculating-costs)
 *   Tile models.  "Any image with "detail": "low" costs a set, base number
 *   of tokens.  To calculate the cost of an image with "detail": "high":
 *   scale to fit in a 2048px x 2048px square, maintaining original aspect
 *   ratio; scale so that the image's shortest side is 768px long; count the
 *   number of 512px squares in the image - each square costs a set amount of
 *   tokens; add the base tokens to the total."  Worked examples (gpt-4o):
 *   1024 x 1024 high = 765 (768 x 768, 4 tiles); 2048 x 4096 high = 1105
 *   (1024 x 2048, then 768 x 1536, 6 tiles); 4096 x 8192 low = 85.
 *   Decided here:
 *   - Both scalings only shrink.  The text does not say so for the second,
 *     but an image smaller than 768 px is not enlarged: gpt-4o bills a
 *     128 x 64 image 170 tokens (one tile) more in high detail than in low
 *     (measured by a user, not published: https://community.openai.com/t/
 *     vision-more-than-one-way-to-send-a-request-undocumented-and-different-pricing-realized/1262691).
 *   - Each scaling gives whole pixels, rounded to the nearest (half up).
 *     Not published; OpenAI bills 2049 x 513 as 8 tiles (2048 x 512.75 ->
 *     513: two rows) and 2050 x 513 as 4 (2048 x 512.4995 -> 512: one row),
 *     which rounding to the nearest reproduces and neither floor nor ceiling
 *     nor unrounded sizes do: https://community.openai.com/t/
 *     vision-pricing-calculator-inaccurate-resizing-rounding-vs-api-costs/1281361
 *   - "auto" is counted as "high".  OpenAI documents "auto" as the model
 *     deciding between low and high from the input size ("By default, the
 *     model will use the auto setting which will look at the image input
 *     size and decide if it should use the low or high setting"), not as
 *     high; high is never cheaper than low (base + at least one tile), so it
 *     is the count that never falls short.
 *   - The largest high-detail count is base + 8 tiles (768 x 2048 after the
 *     scalings: 2 x 4 tiles); an image of unknown size costs that.
 *   Patch models (gpt-4.1-mini, gpt-4.1-nano, o4-mini, gpt-5-mini,
 *   gpt-5-nano), same page: "A. Calculate the number of 32px x 32px patches
 *   that are needed to fully cover the image: raw_patches =
 *   ceil(width/32) x ceil(height/32).  B. If the number of patches exceeds
 *   1536, we scale down the image so that it can be covered by no more than
 *   1536 patches: r = sqrt(32^2 x 1536 / (width x height)); r = r x min(
 *   floor(width x r/32) / (width x r/32), floor(height x r/32) /
 *   (height x r/32)).  C. The token cost is the number of patches, capped at
 *   a maximum of 1536 tokens: image_tokens = ceil(resized_width/32) x
 *   ceil(resized_height/32).  D. Apply a multiplier based on the model."
 *   Worked examples: 1024 x 1024 = 1024; 1800 x 2400 = 1452 (33 x 44).
 *   Decided here:
 *   - The formula is computed exactly, in integers (ImageOpenAIPatches
 *     shows how), not in floating point: w x r / 32 is sqrt(1536 w / h), and
 *     after the second step one side is exactly its floor, which floating
 *     point often misses by a hair and then rounds up to one patch more
 *     (the formula in doubles differs from the exact one on 13% of random
 *     sizes up to 10000 px).  An implementation that rounds the resized
 *     size to whole pixels counts the same or, rarely, one row fewer.
 *   - The multiplier's rounding is not published: the product is rounded
 *     up.  The multiplier is given in thousandths (1.62 -> 1620).
 *   - An image so elongated that a side gets 0 patches in step B (height
 *     over 1536 times the width) makes the published formula give 0; it is
 *     counted at the cap, 1536.
 *
 * Anthropic, "Vision", Resolution and token cost:
 *   https://platform.claude.com/docs/en/build-with-claude/vision
 *   "Each patch is a 28x28-pixel block of the image, referred to as a visual
 *   token.  An image, therefore, costs ceil(width / 28) x ceil(height / 28)
 *   visual tokens."  Tiers: high-resolution (Claude 4.7 and later models)
 *   2576 px long edge, 4784 visual tokens; standard (all other models)
 *   1568 px, 1568 tokens.  Published table (standard / high-resolution):
 *   200x200 64 / 64; 1000x1000 1296 / 1296; 1092x1092 1521 / 1521;
 *   1920x1080 1456x819 1560 / 2691; 2000x1500 1269x952 1564 / 3888;
 *   3840x2160 1456x819 1560 / 2576x1449 4784.
 *   The resize rule and its reference implementation, "How Claude resizes
 *   and pads images":
 *   https://platform.claude.com/docs/en/build-with-claude/vision-coordinates
 *   "Claude finds the largest aspect-preserving size that satisfies both of
 *   the model's image limits: edge limit: neither side exceeds the maximum
 *   edge length; visual token limit: the image's token cost does not exceed
 *   the model's visual token budget."  anthropic_size() below is that
 *   reference implementation (a binary search along the long edge, the
 *   short edge rounded half to even from the same double-precision
 *   quotient: "The live API resolves exact .5 ties toward the even
 *   neighbor"), and reproduces its worked example (1075 x 1520 -> 924 x 1307
 *   on the standard tier).  It gives 1270 x 952 for 2000 x 1500 where the
 *   table prints 1269 x 952 (what rounding 952.5 half up would give); both
 *   cost 46 x 34 = 1564 tokens.  The padding to a multiple of 28 that
 *   follows adds no patch.
 *   This replaces the rule earlier versions of the page published
 *   (https://docs.anthropic.com/en/docs/build-with-claude/vision):
 *   tokens = width x height / 750, an image resized when its long edge is
 *   over 1568 px or it is over "~1,600 tokens", with a table of 200x200
 *   ~54, 1000x1000 ~1334, 1092x1092 ~1590: an approximation with no exact
 *   resize rule, which the patch count now stands for.
 *   The largest count is the tier's budget (1568 or 4784), which an image
 *   of unknown size costs.
 *
 * Headers.  PNG: the signature, then the IHDR chunk (length 13, width and
 * height big-endian, CRC-32 over type and data), 33 bytes (the PNG
 * specification's signature, chunk layout and IHDR).  GIF: "GIF87a" or
 * "GIF89a", then the logical screen descriptor (width and height
 * little-endian), 13 bytes (GIF89a specification, 17-18).  JPEG: SOI, then
 * marker segments, each "FF xx" (any number of FF fill bytes before xx)
 * with a two-byte length that counts itself, except the standalone markers
 * TEM and RST0-7; the first start-of-frame (SOF0-3, 5-7, 9-11, 13-15) gives
 * height and width; segments before it (APPn with Exif thumbnails, DQT,
 * DHT, COM ...) are skipped by their length without being read (ITU-T
 * T.81, annex B: markers, marker segments, the frame header).  EXIF
 * orientation is not read: every rule here costs a rotated image the same.
 * WebP: "RIFF", size, "WEBP", then the first chunk: "VP8 " (key frame tag,
 * start code 9D 01 2A, 14-bit width and height), "VP8L" (signature 2F,
 * 14-bit width-1 and height-1, version 0) or "VP8X" (24-bit canvas width-1
 * and height-1) (RFC 9649, the WebP container and the VP8L header; RFC
 * 6386, the VP8 frame header).  Animated images count by their canvas
 * (GIF's logical screen, VP8X's canvas): the providers look at the first
 * frame only.
 */
#include "image.h"

#include <math.h>
#include <string.h>

/* ---- where the bytes come from: raw, or decoded from base64 on demand ---- */

typedef struct Source
{
	const uint8_t *bytes;		/* raw bytes, or NULL */
	const char *b64;			/* checked base64 text, when bytes is NULL */
	size_t		len;			/* bytes of the image */
	size_t		count;			/* bytes read (decoded) by the parser */
} Source;

static const int8_t b64_value[256] = {
	['A'] = 1, ['B'] = 2, ['C'] = 3, ['D'] = 4, ['E'] = 5, ['F'] = 6, ['G'] = 7,
	['H'] = 8, ['I'] = 9, ['J'] = 10, ['K'] = 11, ['L'] = 12, ['M'] = 13, ['N'] = 14,
	['O'] = 15, ['P'] = 16, ['Q'] = 17, ['R'] = 18, ['S'] = 19, ['T'] = 20, ['U'] = 21,
	['V'] = 22, ['W'] = 23, ['X'] = 24, ['Y'] = 25, ['Z'] = 26,
	['a'] = 27, ['b'] = 28, ['c'] = 29, ['d'] = 30, ['e'] = 31, ['f'] = 32, ['g'] = 33,
	['h'] = 34, ['i'] = 35, ['j'] = 36, ['k'] = 37, ['l'] = 38, ['m'] = 39, ['n'] = 40,
	['o'] = 41, ['p'] = 42, ['q'] = 43, ['r'] = 44, ['s'] = 45, ['t'] = 46, ['u'] = 47,
	['v'] = 48, ['w'] = 49, ['x'] = 50, ['y'] = 51, ['z'] = 52,
	['0'] = 53, ['1'] = 54, ['2'] = 55, ['3'] = 56, ['4'] = 57, ['5'] = 58, ['6'] = 59,
	['7'] = 60, ['8'] = 61, ['9'] = 62, ['+'] = 63, ['/'] = 64,
};								/* the value plus one; 0 for every other byte */

/* byte i of the decoded data; the text is checked, '=' decodes as 0 */
static uint8_t
b64_byte(const char *b64, size_t i)
{
	const unsigned char *q = (const unsigned char *) b64 + (i / 3) * 4;
	uint32_t	v = 0;
	int			k;

	for (k = 0; k < 4; k++)
		v = (v << 6) | (uint32_t) (b64_value[q[k]] > 0 ? b64_value[q[k]] - 1 : 0);
	return (uint8_t) (v >> (16 - 8 * (i % 3)));
}

/* n bytes at off, or false if the data ends first */
static int
source_read(Source *s, size_t off, size_t n, uint8_t *out)
{
	size_t		i;

	if (off > s->len || n > s->len - off)
		return 0;
	if (s->bytes)
		memcpy(out, s->bytes + off, n);
	else
		for (i = 0; i < n; i++)
			out[i] = b64_byte(s->b64, off + i);
	s->count += n;
	return 1;
}

static uint32_t
be16(const uint8_t *p)
{
	return ((uint32_t) p[0] << 8) | p[1];
}

static uint32_t
be32(const uint8_t *p)
{
	return ((uint32_t) p[0] << 24) | ((uint32_t) p[1] << 16) | ((uint32_t) p[2] << 8) | p[3];
}

static uint32_t
le16(const uint8_t *p)
{
	return ((uint32_t) p[1] << 8) | p[0];
}

static uint32_t
le24(const uint8_t *p)
{
	return ((uint32_t) p[2] << 16) | ((uint32_t) p[1] << 8) | p[0];
}

static uint32_t
le32(const uint8_t *p)
{
	return ((uint32_t) p[3] << 24) | ((uint32_t) p[2] << 16) | ((uint32_t) p[1] << 8) | p[0];
}

static ImageError
fail(ImageInfo *out, ImageError err, size_t offset, const char *detail)
{
	out->detail = detail;
	out->offset = offset;
	return err;
}

/* the size found: checked against 0 and IMAGE_MAX_SIDE */
static ImageError
found(ImageInfo *out, uint32_t width, uint32_t height, size_t offset)
{
	out->width = width;
	out->height = height;
	if (width == 0 || height == 0)
		return fail(out, IMAGE_ERR_ZERO_SIZE, offset,
					"The image header gives a width or height of 0.");
	if (width > IMAGE_MAX_SIDE || height > IMAGE_MAX_SIDE)
		return fail(out, IMAGE_ERR_TOO_LARGE, offset,
					"The image header gives a width or height over 65535 pixels, more than any provider accepts.");
	return IMAGE_OK;
}

/* ---- PNG ---- */

static uint32_t
crc32_png(const uint8_t *p, size_t n)
{
	uint32_t	c = 0xFFFFFFFFu;
	size_t		i;
	int			k;

	for (i = 0; i < n; i++)
	{
		c ^= p[i];
		for (k = 0; k < 8; k++)
			c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
	}
	return c ^ 0xFFFFFFFFu;
}

static ImageError
parse_png(Source *s, ImageInfo *out)
{
	uint8_t		h[33];
	uint32_t	w,
				ht;

	if (!source_read(s, 0, sizeof(h), h))
		return fail(out, IMAGE_ERR_TRUNCATED, s->len,
					"The PNG data ends before its IHDR chunk is complete (33 bytes).");
	if (be32(h + 8) != 13 || memcmp(h + 12, "IHDR", 4) != 0)
		return fail(out, IMAGE_ERR_MALFORMED, 8,
					"The first chunk of the PNG data is not an IHDR chunk of 13 bytes.");
	if (crc32_png(h + 12, 17) != be32(h + 29))
		return fail(out, IMAGE_ERR_MALFORMED, 29,
					"The checksum of the PNG's IHDR chunk does not match its contents.");
	w = be32(h + 16);
	ht = be32(h + 20);
	if (w > 0x7FFFFFFFu || ht > 0x7FFFFFFFu)
		return fail(out, IMAGE_ERR_MALFORMED, 16,
					"The PNG's IHDR chunk gives a width or height over 2^31 - 1, which the format does not allow.");
	return found(out, w, ht, 16);
}

/* ---- GIF ---- */

static ImageError
parse_gif(Source *s, ImageInfo *out)
{
	uint8_t		h[13];

	if (!source_read(s, 0, sizeof(h), h))
		return fail(out, IMAGE_ERR_TRUNCATED, s->len,
					"The GIF data ends before its logical screen descriptor is complete (13 bytes).");
	if (memcmp(h, "GIF87a", 6) != 0 && memcmp(h, "GIF89a", 6) != 0)
		return fail(out, IMAGE_ERR_MALFORMED, 3,
					"The GIF data's version is neither 87a nor 89a.");
	return found(out, le16(h + 6), le16(h + 8), 6);
}

/* ---- JPEG ---- */

static int
jpeg_is_sof(uint8_t m)
{
	/* C4 is DHT, C8 is reserved (JPG), CC is DAC */
	return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
}

static ImageError
parse_jpeg(Source *s, ImageInfo *out)
{
	size_t		pos = 2;		/* after SOI */
	size_t		last = 0;		/* where the last segment started */

	for (;;)
	{
		uint8_t		b[8];
		uint8_t		m;
		uint32_t	seglen;

		if (pos > s->len)
			return fail(out, IMAGE_ERR_TRUNCATED, last,
						"A JPEG marker segment's length runs past the end of the data.");
		if (!source_read(s, pos, 1, b))
			return fail(out, IMAGE_ERR_TRUNCATED, pos,
						"The JPEG data ends before its frame header (SOF).");
		last = pos;
		if (b[0] != 0xFF)
			return fail(out, IMAGE_ERR_MALFORMED, pos,
						"The JPEG data has a byte other than a marker where a marker segment should start.");
		/* fill bytes: any number of FF before the marker code */
		do
		{
			pos++;
			if (!source_read(s, pos, 1, b))
				return fail(out, IMAGE_ERR_TRUNCATED, pos,
							"The JPEG data ends before its frame header (SOF).");
		} while (b[0] == 0xFF);
		m = b[0];
		pos++;
		if (m == 0x01 || (m >= 0xD0 && m <= 0xD7))
			continue;			/* TEM, RSTn: no length */
		if (m == 0x00 || m == 0xD8)
			return fail(out, IMAGE_ERR_MALFORMED, pos - 1,
						"The JPEG data has a marker that cannot appear before its frame header.");
		if (m == 0xD9)
			return fail(out, IMAGE_ERR_MALFORMED, pos - 1,
						"The JPEG data ends (EOI) without a frame header (SOF).");
		if (m == 0xDA)
			return fail(out, IMAGE_ERR_MALFORMED, pos - 1,
						"The JPEG data starts a scan (SOS) before its frame header (SOF).");
		if (!source_read(s, pos, 2, b))
			return fail(out, IMAGE_ERR_TRUNCATED, pos,
						"The JPEG data ends inside a marker segment's length.");
		seglen = be16(b);
		if (seglen < 2)
			return fail(out, IMAGE_ERR_MALFORMED, pos,
						"A JPEG marker segment gives a length under 2.");
		if (jpeg_is_sof(m))
		{
			/* length, precision, height, width, number of components */
			if (!source_read(s, pos, 8, b))
				return fail(out, IMAGE_ERR_TRUNCATED, pos,
							"The JPEG data ends inside its frame header (SOF).");
			if (b[7] == 0 || seglen != 8 + 3 * (uint32_t) b[7])
				return fail(out, IMAGE_ERR_MALFORMED, pos,
							"The JPEG frame header's length does not match its number of components.");
			/* b + 3: height (Y), b + 5: width (X) */
			if (be16(b + 3) == 0)
				return fail(out, IMAGE_ERR_ZERO_SIZE, pos + 3,
							"The JPEG frame header gives a height of 0 (to be set by a later DNL marker), which is not read.");
			return found(out, be16(b + 5), be16(b + 3), pos + 3);
		}
		pos += seglen;			/* skipped, never read */
	}
}

/* ---- WebP ---- */

static ImageError
parse_webp(Source *s, ImageInfo *out)
{
	uint8_t		h[30];
	uint32_t	riff_size;

	if (!source_read(s, 0, 12, h))
		return fail(out, IMAGE_ERR_TRUNCATED, s->len,
					"The WebP data ends inside its RIFF header.");
	if (memcmp(h + 8, "WEBP", 4) != 0)
		return fail(out, IMAGE_ERR_FORMAT, 8,
					"The RIFF data is not a WebP file (no \"WEBP\" form type).");
	if (!source_read(s, 12, 8, h + 12))
		return fail(out, IMAGE_ERR_TRUNCATED, s->len,
					"The WebP data ends before its first chunk's header.");
	riff_size = le32(h + 4);
	if (riff_size < 12 || (riff_size & 1))
		return fail(out, IMAGE_ERR_MALFORMED, 4,
					"The WebP data's RIFF size is odd or too small to hold a chunk.");
	if ((uint64_t) riff_size + 8 > s->len)
		return fail(out, IMAGE_ERR_TRUNCATED, s->len,
					"The WebP data is shorter than its RIFF header says.");
	if (memcmp(h + 12, "VP8 ", 4) == 0)
	{
		uint32_t	tag;

		if (!source_read(s, 20, 10, h + 20))
			return fail(out, IMAGE_ERR_TRUNCATED, s->len,
						"The WebP data ends inside its VP8 frame header.");
		tag = h[20] | ((uint32_t) h[21] << 8) | ((uint32_t) h[22] << 16);
		if ((tag & 1) != 0)
			return fail(out, IMAGE_ERR_MALFORMED, 20,
						"The WebP's VP8 frame is not a key frame.");
		if (h[23] != 0x9D || h[24] != 0x01 || h[25] != 0x2A)
			return fail(out, IMAGE_ERR_MALFORMED, 23,
						"The WebP's VP8 frame lacks its start code.");
		/* 14 bits of size; the top 2 are a scaling hint for display */
		return found(out, le16(h + 26) & 0x3FFF, le16(h + 28) & 0x3FFF, 26);
	}
	if (memcmp(h + 12, "VP8L", 4) == 0)
	{
		uint32_t	bits;

		if (!source_read(s, 20, 5, h + 20))
			return fail(out, IMAGE_ERR_TRUNCATED, s->len,
						"The WebP data ends inside its VP8L header.");
		if (h[20] != 0x2F)
			return fail(out, IMAGE_ERR_MALFORMED, 20,
						"The WebP's VP8L chunk lacks its signature byte.");
		bits = le32(h + 21);
		if ((bits >> 29) != 0)
			return fail(out, IMAGE_ERR_MALFORMED, 21,
						"The WebP's VP8L header has a version other than 0.");
		return found(out, (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1, 21);
	}
	if (memcmp(h + 12, "VP8X", 4) == 0)
	{
		uint32_t	w,
					ht;

		if (!source_read(s, 20, 10, h + 20))
			return fail(out, IMAGE_ERR_TRUNCATED, s->len,
						"The WebP data ends inside its VP8X header.");
		if (le32(h + 16) < 10)
			return fail(out, IMAGE_ERR_MALFORMED, 16,
						"The WebP's VP8X chunk is shorter than 10 bytes.");
		w = le24(h + 24) + 1;
		ht = le24(h + 27) + 1;
		if ((uint64_t) w * ht > 0xFFFFFFFFu)
			return fail(out, IMAGE_ERR_MALFORMED, 24,
						"The WebP's canvas is larger than 2^32 - 1 pixels, which the format does not allow.");
		return found(out, w, ht, 24);
	}
	return fail(out, IMAGE_ERR_MALFORMED, 12,
				"The WebP data's first chunk is none of VP8, VP8L or VP8X.");
}

/* ---- the format, from the first bytes ---- */

typedef struct Magic
{
	ImageFormat format;
	const char *bytes;
	size_t		len;
} Magic;

static const Magic magics[] = {
	{IMAGE_FORMAT_PNG, "\x89PNG\r\n\x1a\n", 8},
	{IMAGE_FORMAT_JPEG, "\xFF\xD8\xFF", 3},
	{IMAGE_FORMAT_GIF, "GIF8", 4},
	{IMAGE_FORMAT_WEBP, "RIFF", 4},
};

static ImageError
parse(Source *s, ImageInfo *out)
{
	uint8_t		head[8];
	size_t		have = s->len < sizeof(head) ? s->len : sizeof(head);
	size_t		i;

	memset(out, 0, sizeof(*out));
	if (s->len == 0)
		return fail(out, IMAGE_ERR_TRUNCATED, 0, "The image data is empty.");
	source_read(s, 0, have, head);
	s->count = 0;				/* the parser reads the signature again */
	for (i = 0; i < sizeof(magics) / sizeof(magics[0]); i++)
	{
		const Magic *m = &magics[i];

		if (memcmp(head, m->bytes, have < m->len ? have : m->len) != 0)
			continue;
		out->format = m->format;
		if (have < m->len)
			return fail(out, IMAGE_ERR_TRUNCATED, s->len,
						"The image data ends inside the signature of its format.");
		switch (m->format)
		{
			case IMAGE_FORMAT_PNG:
				return parse_png(s, out);
			case IMAGE_FORMAT_JPEG:
				return parse_jpeg(s, out);
			case IMAGE_FORMAT_GIF:
				return parse_gif(s, out);
			default:
				return parse_webp(s, out);
		}
	}
	return fail(out, IMAGE_ERR_FORMAT, 0,
				"The image data does not start with the signature of a PNG, JPEG, GIF or WebP file.");
}

ImageError
ImageDimensions(const uint8_t *data, size_t len, ImageInfo *out)
{
	Source		s = {data, NULL, len, 0};
	ImageError	err = parse(&s, out);

	out->header_bytes = s.count;
	return err;
}

ImageError
ImageBase64Check(const char *b64, size_t len, size_t *decoded_len, ImageInfo *out)
{
	const unsigned char *t = (const unsigned char *) b64;
	size_t		pad = 0;
	size_t		i;

	memset(out, 0, sizeof(*out));
	*decoded_len = 0;
	if (len % 4 != 0)
		return fail(out, IMAGE_ERR_BASE64, len,
					"The base64 text's length is not a multiple of 4: it is cut short or lacks its '=' padding.");
	if (len > 0 && t[len - 1] == '=')
		pad = (t[len - 2] == '=') ? 2 : 1;
	for (i = 0; i < len - pad; i++)
		if (b64_value[t[i]] == 0)
			return fail(out, IMAGE_ERR_BASE64, i, t[i] == '='
						? "The base64 text has '=' before its end."
						: "The base64 text has a character outside the base64 alphabet (A-Z, a-z, 0-9, '+', '/'; no white space).");
	/* the bits after the last byte must be 0 (RFC 4648, 3.5) */
	if (pad > 0 && ((b64_value[t[len - pad - 1]] - 1) & (pad == 2 ? 0x0F : 0x03)) != 0)
		return fail(out, IMAGE_ERR_BASE64, len - pad - 1,
					"The base64 text's last character before the padding has bits set that encode no byte.");
	*decoded_len = len / 4 * 3 - pad;
	return IMAGE_OK;
}

ImageError
ImageBase64Dimensions(const char *b64, size_t len, ImageInfo *out)
{
	Source		s = {NULL, b64, 0, 0};
	ImageError	err = ImageBase64Check(b64, len, &s.len, out);

	if (err != IMAGE_OK)
		return err;
	err = parse(&s, out);
	out->header_bytes = s.count;
	return err;
}

/* ---- data URLs ---- */

static int
prefix_nocase(const char *s, size_t len, const char *prefix)
{
	size_t		n = strlen(prefix);
	size_t		i;

	if (len < n)
		return 0;
	for (i = 0; i < n; i++)
	{
		char		c = s[i];

		if (c >= 'A' && c <= 'Z')
			c += 'a' - 'A';
		if (c != prefix[i])
			return 0;
	}
	return 1;
}

int
ImageIsDataUrl(const char *url, size_t len)
{
	return prefix_nocase(url, len, "data:");
}

ImageError
ImageDataUrl(const char *url, size_t len, const char **media_type, size_t *media_type_len,
			 const char **data, size_t *data_len, ImageInfo *out)
{
	const char *comma;
	size_t		head,
				i;

	memset(out, 0, sizeof(*out));
	*media_type = *data = NULL;
	*media_type_len = *data_len = 0;
	if (!ImageIsDataUrl(url, len))
		return fail(out, IMAGE_ERR_DATA_URL, 0, "The URL is not a data: URL.");
	comma = memchr(url, ',', len);
	if (comma == NULL)
		return fail(out, IMAGE_ERR_DATA_URL, len, "The data: URL has no comma before its data.");
	head = (size_t) (comma - url);
	if (head < 12 || !prefix_nocase(comma - 7, 7, ";base64"))
		return fail(out, IMAGE_ERR_DATA_URL, head,
					"The data: URL is not base64-encoded (\";base64\" before the comma).");
	for (i = 5; i < head && url[i] != ';'; i++)
		;
	*media_type = url + 5;
	*media_type_len = i - 5;
	*data = comma + 1;
	*data_len = len - head - 1;
	return IMAGE_OK;
}

const char *
ImageErrorMessage(ImageError err)
{
	switch (err)
	{
		case IMAGE_OK:
			return "no error";
		case IMAGE_ERR_FORMAT:
			return "image is not a PNG, JPEG, GIF or WebP file";
		case IMAGE_ERR_TRUNCATED:
			return "image data is truncated";
		case IMAGE_ERR_MALFORMED:
			return "image header is malformed";
		case IMAGE_ERR_ZERO_SIZE:
			return "image has a width or height of 0";
		case IMAGE_ERR_TOO_LARGE:
			return "image is too large";
		case IMAGE_ERR_BASE64:
			return "image data is not valid base64";
		case IMAGE_ERR_DATA_URL:
			return "image URL is not a base64 data URL";
	}
	return "unknown image error";
}

const char *
ImageFormatName(ImageFormat format)
{
	switch (format)
	{
		case IMAGE_FORMAT_PNG:
			return "png";
		case IMAGE_FORMAT_JPEG:
			return "jpeg";
		case IMAGE_FORMAT_GIF:
			return "gif";
		case IMAGE_FORMAT_WEBP:
			return "webp";
		default:
			return "unknown";
	}
}

const char *
ImageFormatMediaType(ImageFormat format)
{
	switch (format)
	{
		case IMAGE_FORMAT_PNG:
			return "image/png";
		case IMAGE_FORMAT_JPEG:
			return "image/jpeg";
		case IMAGE_FORMAT_GIF:
			return "image/gif";
		case IMAGE_FORMAT_WEBP:
			return "image/webp";
		default:
			return NULL;
	}
}

int
ImageDetailParse(const char *s, size_t len, ImageDetail *out)
{
	if (len == 3 && memcmp(s, "low", 3) == 0)
		*out = IMAGE_DETAIL_LOW;
	else if (len == 4 && memcmp(s, "high", 4) == 0)
		*out = IMAGE_DETAIL_HIGH;
	else if (len == 4 && memcmp(s, "auto", 4) == 0)
		*out = IMAGE_DETAIL_AUTO;
	else
		return 0;
	return 1;
}

/* ---- OpenAI, tile models ---- */

/* a / b rounded to the nearest, half up (a >= 0, b > 0) */
static int64_t
div_round(int64_t a, int64_t b)
{
	return (2 * a + b) / (2 * b);
}

static int64_t
div_ceil(int64_t a, int64_t b)
{
	return (a + b - 1) / b;
}

void
ImageOpenAITileSize(int width, int height, int *tiled_w, int *tiled_h)
{
	int64_t		w = width,
				h = height;

	if (w < 1 || h < 1)
	{
		/* unknown: the size that costs the most */
		*tiled_w = 768;
		*tiled_h = 2048;
		return;
	}
	/* into a 2048 x 2048 square, only shrinking */
	if (w > 2048 || h > 2048)
	{
		if (w >= h)
		{
			h = div_round(h * 2048, w);
			w = 2048;
		}
		else
		{
			w = div_round(w * 2048, h);
			h = 2048;
		}
		if (w < 1)
			w = 1;
		if (h < 1)
			h = 1;
	}
	/* the shortest side to 768, only shrinking */
	if (w > 768 && h > 768)
	{
		if (w <= h)
		{
			h = div_round(h * 768, w);
			w = 768;
		}
		else
		{
			w = div_round(w * 768, h);
			h = 768;
		}
	}
	*tiled_w = (int) w;
	*tiled_h = (int) h;
}

int64_t
ImageTokensOpenAITiles(int width, int height, ImageDetail detail,
					   int base_tokens, int tile_tokens)
{
	int			w,
				h;

	if (detail == IMAGE_DETAIL_LOW)
		return base_tokens;
	ImageOpenAITileSize(width, height, &w, &h);
	return base_tokens + (int64_t) tile_tokens * div_ceil(w, 512) * div_ceil(h, 512);
}

int64_t
ImageTokensOpenAI(int width, int height, ImageDetail detail)
{
	return ImageTokensOpenAITiles(width, height, detail, 85, 170);
}

/* ---- OpenAI, patch models ---- */

#define OPENAI_PATCH		32
#define OPENAI_PATCHES_MAX	1536

/* the largest k >= 0 with k * k * d <= n (n >= 0, d > 0) */
static int64_t
floor_sqrt_ratio(int64_t n, int64_t d)
{
	int64_t		k = (int64_t) sqrt((double) n / (double) d);

	while (k > 0 && k * k * d > n)
		k--;
	while ((k + 1) * (k + 1) * d <= n)
		k++;
	return k;
}

/*
 * The published steps, exactly.  With r0 = sqrt(32^2 * 1536 / (w * h)),
 * w * r0 / 32 = sqrt(1536 * w / h) =: a and h * r0 / 32 = sqrt(1536 * h / w)
 * =: b.  Step B scales by s = min(floor(a) / a, floor(b) / b): the side
 * whose ratio is the smaller gets exactly floor() patches and the other
 * side covers floor(a) * h / w (or floor(b) * w / h) patches, a rational
 * number whose ceiling is taken.  floor(a) / a <= floor(b) / b compares as
 * floor(a) * h <= floor(b) * w.
 */
int64_t
ImageOpenAIPatches(int width, int height)
{
	int64_t		w = width,
				h = height;
	int64_t		raw,
				fa,
				fb,
				pw,
				ph;

	if (w < 1 || h < 1)
		return OPENAI_PATCHES_MAX;
	raw = div_ceil(w, OPENAI_PATCH) * div_ceil(h, OPENAI_PATCH);
	if (raw <= OPENAI_PATCHES_MAX)
		return raw;
	fa = floor_sqrt_ratio(OPENAI_PATCHES_MAX * w, h);
	fb = floor_sqrt_ratio(OPENAI_PATCHES_MAX * h, w);
	if (fa == 0 || fb == 0)
		return OPENAI_PATCHES_MAX;	/* the formula would give 0 */
	if (fa * h <= fb * w)
	{
		pw = fa;
		ph = div_ceil(fa * h, w);
	}
	else
	{
		ph = fb;
		pw = div_ceil(fb * w, h);
	}
	return pw * ph < OPENAI_PATCHES_MAX ? pw * ph : OPENAI_PATCHES_MAX;
}

int64_t
ImageTokensOpenAIPatches(int width, int height, int multiplier_permille)
{
	if (multiplier_permille < 1)
		multiplier_permille = 1000;
	return div_ceil(ImageOpenAIPatches(width, height) * multiplier_permille, 1000);
}

/* ---- Anthropic ---- */

#define ANTHROPIC_PATCH		28

static void
anthropic_limits(ImageAnthropicTier tier, int64_t *max_edge, int64_t *max_tokens)
{
	if (tier == IMAGE_ANTHROPIC_HIGH_RES)
	{
		*max_edge = 2576;
		*max_tokens = 4784;
	}
	else
	{
		*max_edge = 1568;
		*max_tokens = 1568;
	}
}

static int64_t
anthropic_tokens(int64_t w, int64_t h)
{
	return div_ceil(w, ANTHROPIC_PATCH) * div_ceil(h, ANTHROPIC_PATCH);
}

static int
anthropic_fits(int64_t w, int64_t h, int64_t max_edge, int64_t max_tokens)
{
	return div_ceil(w, ANTHROPIC_PATCH) * ANTHROPIC_PATCH <= max_edge &&
		div_ceil(h, ANTHROPIC_PATCH) * ANTHROPIC_PATCH <= max_edge &&
		anthropic_tokens(w, h) <= max_tokens;
}

/* Python's max(round(x), 1) on a double: half to even, as rint() does by default */
static int64_t
short_edge(int64_t long_edge, double aspect)
{
	int64_t		s = (int64_t) rint((double) long_edge / aspect);

	return s < 1 ? 1 : s;
}

/* Anthropic's reference implementation, resized_size(), step by step */
static void
anthropic_size(int64_t w, int64_t h, int64_t max_edge, int64_t max_tokens,
			   int64_t *rw, int64_t *rh)
{
	double		aspect;
	int64_t		lo,
				hi;

	if (anthropic_fits(w, h, max_edge, max_tokens))
	{
		*rw = w;
		*rh = h;
		return;
	}
	if (h > w)
	{
		anthropic_size(h, w, max_edge, max_tokens, rh, rw);
		return;
	}
	/* binary search along the long edge: lo always fits, hi never does */
	aspect = (double) w / (double) h;
	lo = 1;
	hi = w;
	while (lo + 1 < hi)
	{
		int64_t		mid = (lo + hi) / 2;

		if (anthropic_fits(mid, short_edge(mid, aspect), max_edge, max_tokens))
			lo = mid;
		else
			hi = mid;
	}
	*rw = lo;
	*rh = short_edge(lo, aspect);
}

void
ImageAnthropicSize(int width, int height, ImageAnthropicTier tier,
				   int *resized_w, int *resized_h)
{
	int64_t		max_edge,
				max_tokens,
				rw,
				rh;

	anthropic_limits(tier, &max_edge, &max_tokens);
	if (width < 1 || height < 1)
	{
		/* unknown: a size that costs the whole budget */
		*resized_w = (int) max_edge;
		*resized_h = (int) (max_tokens / (max_edge / ANTHROPIC_PATCH) * ANTHROPIC_PATCH);
		return;
	}
	anthropic_size(width, height, max_edge, max_tokens, &rw, &rh);
	*resized_w = (int) rw;
	*resized_h = (int) rh;
}

int64_t
ImageTokensAnthropic(int width, int height, ImageAnthropicTier tier)
{
	int64_t		max_edge,
				max_tokens;
	int			w,
				h;

	anthropic_limits(tier, &max_edge, &max_tokens);
	if (width < 1 || height < 1)
		return max_tokens;
	ImageAnthropicSize(width, height, tier, &w, &h);
	return anthropic_tokens(w, h);
}
