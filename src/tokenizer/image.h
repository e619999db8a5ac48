/*
 * image.h
 *		What an image in a chat message costs: its size read from the first
 *		bytes of a PNG, JPEG, GIF or WebP file (raw or base64), and the token
 *		count each provider's published rule gives for that size.
 *
 * Plain C99 with no PostgreSQL dependency, like bpe.c: it allocates nothing,
 * keeps no state and calls nothing back, so the server, the unit test
 * (tools/image_check.c) and any other program use the same code.  Errors are
 * an ImageError and a sentence in ImageInfo.detail (a static string); the
 * caller turns them into its own error report.
 *
 * Reading a size
 *	ImageDimensions() reads the header of the image bytes: PNG's IHDR chunk
 *	(its CRC checked), the frame header (SOFn) of a JPEG after skipping the
 *	segments before it by their lengths, GIF's logical screen, and WebP's
 *	VP8, VP8L or VP8X chunk header.  Only the header is read, never the pixel
 *	data, so a file cut short after its header is not noticed here.
 *	ImageBase64Dimensions() first checks the whole base64 text (standard
 *	alphabet of RFC 4648, padded to a multiple of 4, '=' only at the end,
 *	zero bits after the last byte; no white space, no URL-safe alphabet),
 *	then decodes only the bytes the header parser reads: the segments a JPEG
 *	skips are never decoded.  A width or height of 0, or over
 *	IMAGE_MAX_SIDE, is refused.
 *
 * Counting tokens (sources quoted in image.c, next to the code)
 *	OpenAI, tile models (GPT-4o, GPT-4.1, GPT-4.5, GPT-5, o1, o3, ...):
 *		low detail costs the base; high detail scales the image into
 *		2048x2048, then its shortest side down to 768, and costs the base
 *		plus a price per 512-px tile.  "auto" is counted as "high": OpenAI
 *		says the model picks low or high, and high is never the cheaper.
 *		Published (base, per tile): gpt-4o, gpt-4.1, gpt-4.5 (85, 170);
 *		gpt-5 (70, 140); o1, o1-pro, o3 (75, 150); gpt-4o-mini
 *		(2833, 5667); computer-use-preview (65, 129).
 *	OpenAI, patch models (gpt-4.1-mini, gpt-4.1-nano, o4-mini, gpt-5-mini,
 *		gpt-5-nano): 32-px patches, at most 1536, times a multiplier per
 *		model (published: 1.62, 2.46, 1.72, 1.62, 2.46); the detail level
 *		does not enter.
 *	Anthropic: 28-px patches ("visual tokens"), the image first scaled to
 *		the largest aspect-preserving size within the model's tier: the
 *		standard tier (1568 px long edge, 1568 tokens) or the high-resolution
 *		tier of Claude Opus 4.7 and later models (2576 px, 4784 tokens).
 *
 *	An image whose size is not known (a URL ctxwin does not fetch) is
 *	counted at the most the rule can give: a width or height of
 *	IMAGE_SIZE_UNKNOWN (or anything below 1) asks for that maximum, so such
 *	an image is never counted below what the provider will count.
 */
#ifndef CTXWIN_IMAGE_H
#define CTXWIN_IMAGE_H

#include <stddef.h>
#include <stdint.h>

/*
 * The largest width or height accepted from a header: what JPEG and GIF can
 * hold; a larger one is no real upload (Anthropic refuses over 8000 px)
 */
#define IMAGE_MAX_SIDE			65535

/* A width or height not known: the token functions give their maximum */
#define IMAGE_SIZE_UNKNOWN		0

typedef enum ImageFormat
{
	IMAGE_FORMAT_UNKNOWN = 0,
	IMAGE_FORMAT_PNG,
	IMAGE_FORMAT_JPEG,
	IMAGE_FORMAT_GIF,
	IMAGE_FORMAT_WEBP
} ImageFormat;

typedef enum ImageError
{
	IMAGE_OK = 0,
	IMAGE_ERR_FORMAT,			/* not a PNG, JPEG, GIF or WebP file */
	IMAGE_ERR_TRUNCATED,		/* the data ends inside the header */
	IMAGE_ERR_MALFORMED,		/* the header is not what the format says */
	IMAGE_ERR_ZERO_SIZE,		/* a width or height of 0 */
	IMAGE_ERR_TOO_LARGE,		/* a width or height over IMAGE_MAX_SIDE */
	IMAGE_ERR_BASE64,			/* the text is not strict base64 */
	IMAGE_ERR_DATA_URL			/* a data: URL that is not ";base64," */
} ImageError;

typedef struct ImageInfo
{
	ImageFormat format;			/* known as soon as the magic matched */
	uint32_t	width;
	uint32_t	height;
	size_t		header_bytes;	/* bytes of the image read (for base64: decoded);
								 * what a JPEG skips is not read */
	const char *detail;			/* on error: what is wrong, a full sentence */
	size_t		offset;			/* on error: where (a byte of the image, or a
								 * character of the base64 text) */
} ImageInfo;

extern ImageError ImageDimensions(const uint8_t *data, size_t len, ImageInfo *out);
extern ImageError ImageBase64Dimensions(const char *b64, size_t len, ImageInfo *out);

/*
 * The length of the bytes a strict base64 text decodes to, after checking
 * all of it (as ImageBase64Dimensions does); on error, out->detail and
 * out->offset say what and where.
 */
extern ImageError ImageBase64Check(const char *b64, size_t len, size_t *decoded_len,
								   ImageInfo *out);

/*
 * A data URL, "data:<media type>[;<parameter>...];base64,<data>": whether
 * url is one at all (the scheme, in any case), and its media type (without
 * parameters) and base64 text.  IMAGE_ERR_DATA_URL if it is a data URL of
 * another shape (no comma, not base64).
 */
extern int	ImageIsDataUrl(const char *url, size_t len);
extern ImageError ImageDataUrl(const char *url, size_t len,
							   const char **media_type, size_t *media_type_len,
							   const char **data, size_t *data_len,
							   ImageInfo *out);

extern const char *ImageErrorMessage(ImageError err);
extern const char *ImageFormatName(ImageFormat format);		/* "png", ... */
extern const char *ImageFormatMediaType(ImageFormat format);	/* "image/png", ... */

/* OpenAI's detail levels */
typedef enum ImageDetail
{
	IMAGE_DETAIL_AUTO = 0,
	IMAGE_DETAIL_LOW,
	IMAGE_DETAIL_HIGH
} ImageDetail;

/* "low", "high" or "auto" (exactly, lower case); 0 for anything else */
extern int	ImageDetailParse(const char *s, size_t len, ImageDetail *out);

/* OpenAI tile models: the size tiled (after both scalings) */
extern void ImageOpenAITileSize(int width, int height, int *tiled_w, int *tiled_h);
/* ... and what it costs with a model's base and per-tile price */
extern int64_t ImageTokensOpenAITiles(int width, int height, ImageDetail detail,
									  int base_tokens, int tile_tokens);
/* ... with GPT-4o's prices (85, 170) */
extern int64_t ImageTokensOpenAI(int width, int height, ImageDetail detail);

/* OpenAI patch models: the patches counted (at most 1536) */
extern int64_t ImageOpenAIPatches(int width, int height);
/* ... times the model's multiplier in thousandths (1.62 = 1620; below 1: 1000), rounded up */
extern int64_t ImageTokensOpenAIPatches(int width, int height, int multiplier_permille);

typedef enum ImageAnthropicTier
{
	IMAGE_ANTHROPIC_STANDARD = 0,	/* 1568 px, 1568 visual tokens */
	IMAGE_ANTHROPIC_HIGH_RES		/* 2576 px, 4784: Claude Opus 4.7 and later */
} ImageAnthropicTier;

/* Anthropic: the size Claude resizes the image to (before padding) */
extern void ImageAnthropicSize(int width, int height, ImageAnthropicTier tier,
							   int *resized_w, int *resized_h);
/* ... and its visual tokens */
extern int64_t ImageTokensAnthropic(int width, int height, ImageAnthropicTier tier);

#endif							/* CTXWIN_IMAGE_H */
