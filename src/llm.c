/*
 * llm.c
 *		The LLM client: one HTTP POST of a JSON body to the configured
 *		provider, with libcurl, from a backend.
 *
 * Everything that can go wrong ends as an ERROR with an errcode, raised only
 * after every curl and malloc'd resource is released: curl callbacks never
 * call ereport (they record and return a short count instead), and the
 * transfer runs inside PG_TRY/PG_FINALLY.  Transfers are bounded by
 * ctxwin.llm_timeout_ms, abort on query cancel, statement_timeout or
 * backend termination (progress callback), refuse answers larger than
 * ctxwin.llm_max_response_bytes, speak only http and https and follow no
 * redirect (a redirect could carry the key elsewhere).
 *
 * The API key is read from ctxwin.llm_api_key_file, or from the server's
 * environment variable CTXWIN_LLM_API_KEY, at each request, and is never
 * put in a setting, a log line or an error message.
 */
#include "postgres.h"

#include <curl/curl.h>

#include "common/jsonapi.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "storage/fd.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "ctxwin.h"

#define MIN_LIBCURL_VERSION_NUM 0x075500	/* 7.85.0: CURLOPT_PROTOCOLS_STR */
_Static_assert(LIBCURL_VERSION_NUM >= MIN_LIBCURL_VERSION_NUM,
			   "ctxwin needs libcurl 7.85.0 or later");

PG_FUNCTION_INFO_V1(llm_post);

/* Settings (defined in ctxwin.c) */
int			ctxwin_llm_provider = CTXWIN_PROVIDER_EXTRACTIVE;
char	   *ctxwin_llm_base_url = NULL;
char	   *ctxwin_llm_model = NULL;
char	   *ctxwin_llm_api_key_file = NULL;
int			ctxwin_llm_timeout_ms = 60000;
int			ctxwin_llm_max_retries = 3;
int			ctxwin_llm_max_response_bytes = 1024 * 1024;

static bool curl_ready = false;

/* Set by _PG_init: see LlmPlaceholdersTainted in ctxwin.c. */
bool		ctxwin_llm_settings_tainted = false;

/* A response body, in malloc'd memory: callbacks must not palloc. */
typedef struct Body
{
	char	   *data;
	size_t		len;
	size_t		cap;
	size_t		limit;
	bool		overflow;
	bool		oom;
} Body;

/* Response headers we look at, bounded copies. */
typedef struct Headers
{
	char		content_type[128];
	char		retry_after[64];
} Headers;

static size_t
WriteBody(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	Body	   *b = (Body *) userdata;
	size_t		n = size * nmemb;

	if (b->len + n > b->limit)
	{
		b->overflow = true;
		return 0;				/* makes curl fail with CURLE_WRITE_ERROR */
	}
	if (b->len + n + 1 > b->cap)
	{
		size_t		cap = Max(b->cap * 2, b->len + n + 1);
		char	   *d = realloc(b->data, Max(cap, 4096));

		if (d == NULL)
		{
			b->oom = true;
			return 0;
		}
		b->data = d;
		b->cap = Max(cap, 4096);
	}
	memcpy(b->data + b->len, ptr, n);
	b->len += n;
	b->data[b->len] = '\0';
	return n;
}

/* Copy the value of header name (lower case) into dst if line is that header. */
static void
KeepHeader(const char *line, size_t n, const char *name, char *dst, size_t dstlen)
{
	size_t		k = strlen(name);
	size_t		i;
	size_t		j = 0;

	if (n <= k || pg_strncasecmp(line, name, k) != 0 || line[k] != ':')
		return;
	for (i = k + 1; i < n && (line[i] == ' ' || line[i] == '\t'); i++)
		;
	for (; i < n && line[i] != '\r' && line[i] != '\n' && j + 1 < dstlen; i++)
		dst[j++] = line[i];
	dst[j] = '\0';
}

static size_t
WriteHeader(char *buffer, size_t size, size_t nitems, void *userdata)
{
	Headers    *h = (Headers *) userdata;
	size_t		n = size * nitems;

	KeepHeader(buffer, n, "content-type", h->content_type, sizeof(h->content_type));
	KeepHeader(buffer, n, "retry-after", h->retry_after, sizeof(h->retry_after));
	return n;
}

/* Abort the transfer when the backend is asked to cancel or to exit. */
static int
Progress(void *clientp, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
		 curl_off_t ulnow)
{
	return (QueryCancelPending || ProcDiePending) ? 1 : 0;
}

/*
 * The API key, palloc'd, or NULL if none is configured.  Errors never show
 * the key, and show the file's path to superusers only.
 */
static char *
ReadApiKey(void)
{
	char	   *key = NULL;

	if (ctxwin_llm_api_key_file && ctxwin_llm_api_key_file[0] != '\0')
	{
		FILE	   *f = AllocateFile(ctxwin_llm_api_key_file, "r");
		char		buf[4096];
		size_t		n;

		if (f == NULL)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not read the LLM API key file"),
					 superuser() ? errdetail("File \"%s\": %m.", ctxwin_llm_api_key_file) : 0,
					 errhint("Check \"ctxwin.llm_api_key_file\".")));
		n = fread(buf, 1, sizeof(buf) - 1, f);
		FreeFile(f);
		buf[n] = '\0';
		key = pstrdup(buf);
		explicit_bzero(buf, sizeof(buf));
	}
	else
	{
		const char *env = getenv("CTXWIN_LLM_API_KEY");

		if (env && env[0] != '\0')
			key = pstrdup(env);
	}
	if (key)
	{
		/* trim whitespace and a final newline */
		char	   *s = key;
		char	   *e;

		while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n')
			s++;
		e = s + strlen(s);
		while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r' || e[-1] == '\n'))
			*--e = '\0';
		if (*s == '\0')
			return NULL;
		if (s != key)
			memmove(key, s, strlen(s) + 1);
		if (strpbrk(key, "\r\n") != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("the LLM API key must be a single line")));
	}
	return key;
}

static const char *
ProviderName(void)
{
	return ctxwin_llm_provider == CTXWIN_PROVIDER_ANTHROPIC ? "anthropic" : "openai";
}

/* The endpoint URL for a provider, palloc'd. */
static char *
EndpointUrl(void)
{
	const char *base = ctxwin_llm_base_url;
	size_t		n;

	if (base == NULL || base[0] == '\0')
		base = ctxwin_llm_provider == CTXWIN_PROVIDER_ANTHROPIC ?
			"https://api.anthropic.com" : "https://api.openai.com/v1";
	n = strlen(base);
	while (n > 0 && base[n - 1] == '/')
		n--;
	return psprintf("%.*s%s", (int) n, base,
					ctxwin_llm_provider == CTXWIN_PROVIDER_ANTHROPIC ? "/v1/messages" : "/chat/completions");
}

static void
EnsureCurl(void)
{
	if (!curl_ready)
	{
		if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
			ereport(ERROR,
					(errcode(ERRCODE_SYSTEM_ERROR),
					 errmsg("could not initialize libcurl")));
		curl_ready = true;
	}
}

/*
 * _llm_post(body jsonb) returns jsonb
 *
 * POSTs body to the configured provider's endpoint and returns
 * {"status": int, "body": jsonb, "retry_after": text, "latency_ms": int}
 * for any HTTP answer whose body is JSON (error statuses included, so the
 * caller can tell 429 from 400), and for an error status whose body is not
 * JSON (a proxy's 502 page; "body" is then a JSON string saying so), and
 * raises an error for everything else: no provider configured, connection
 * failure, timeout, cancel, an answer over the size limit, a 2xx answer
 * that is not JSON or is malformed.
 */
Datum
llm_post(PG_FUNCTION_ARGS)
{
	Jsonb	   *body_jb = PG_GETARG_JSONB_P(0);
	char	   *request = JsonbToCString(NULL, &body_jb->root, VARSIZE(body_jb));
	char	   *url;
	char	   *volatile key;
	char	   *volatile auth = NULL;
	char	   *resp;
	CURL	   *volatile h = NULL;
	struct curl_slist *volatile hdrs = NULL;
	Body		body = {0};
	Headers		rh = {{0}, {0}};
	CURLcode	rc = CURLE_OK;
	long		status = 0;
	char		errbuf[CURL_ERROR_SIZE] = {0};
	TimestampTz start;
	long		elapsed_ms;
	JsonLexContext *lex;
	StringInfoData out;
	bool		is_error;
	bool		json_ok;

	if (ctxwin_llm_provider == CTXWIN_PROVIDER_EXTRACTIVE)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("no LLM provider is configured"),
				 errhint("Set \"ctxwin.llm_provider\" to openai or anthropic, or use the extractive strategy.")));
	if (ctxwin_llm_settings_tainted)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("LLM settings of this connection were set by a role that may not set them"),
				 errdetail("The server's values of the superuser-only ctxwin.llm_* settings were replaced before ctxwin was loaded."),
				 errhint("Reconnect without those settings in the connection options, or load ctxwin via \"shared_preload_libraries\".")));
	EnsureCurl();
	url = EndpointUrl();
	key = ReadApiKey();
	if (key)
		auth = ctxwin_llm_provider == CTXWIN_PROVIDER_ANTHROPIC ?
			psprintf("x-api-key: %s", key) : psprintf("Authorization: Bearer %s", key);
	body.limit = (size_t) ctxwin_llm_max_response_bytes;
	start = GetCurrentTimestamp();

	PG_TRY();
	{
		struct curl_slist *l = NULL;

		h = curl_easy_init();
		if (h == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("could not create a libcurl handle")));
		l = curl_slist_append(l, "Content-Type: application/json");
		if (l && ctxwin_llm_provider == CTXWIN_PROVIDER_ANTHROPIC)
			l = curl_slist_append(l, "anthropic-version: 2023-06-01");
		if (l && auth)
			l = curl_slist_append(l, auth);
		hdrs = l;
		if (hdrs == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("out of memory building the LLM request")));
		curl_easy_setopt(h, CURLOPT_URL, url);
		curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
		curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
		curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, request);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long) strlen(request));
		curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long) ctxwin_llm_timeout_ms);
		curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long) Min(ctxwin_llm_timeout_ms, 10000));
		curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, WriteBody);
		curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
		curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, WriteHeader);
		curl_easy_setopt(h, CURLOPT_HEADERDATA, &rh);
		curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, Progress);
		curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
		curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
		curl_easy_setopt(h, CURLOPT_USERAGENT, "ctxwin/" CTXWIN_VERSION);
		rc = curl_easy_perform(h);
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	}
	PG_FINALLY();
	{
		if (hdrs)
			curl_slist_free_all(hdrs);
		if (h)
			curl_easy_cleanup(h);
		if (auth)
			explicit_bzero(auth, strlen(auth));
		if (key)
			explicit_bzero(key, strlen(key));
	}
	PG_END_TRY();

	/* from here on nothing of curl is held; move the body to palloc */
	resp = body.data ? pnstrdup(body.data, body.len) : pstrdup("");
	free(body.data);
	body.data = NULL;
	elapsed_ms = (long) ((GetCurrentTimestamp() - start) / 1000);

	if (rc == CURLE_ABORTED_BY_CALLBACK)
	{
		CHECK_FOR_INTERRUPTS();
		/* not reached unless the interrupt was already serviced */
		ereport(ERROR,
				(errcode(ERRCODE_QUERY_CANCELED),
				 errmsg("LLM request canceled")));
	}
	if (body.overflow)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("LLM answer is larger than %d bytes", ctxwin_llm_max_response_bytes),
				 errhint("Raise \"ctxwin.llm_max_response_bytes\" if answers this large are expected.")));
	if (body.oom)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory reading the LLM answer")));
	if (rc == CURLE_OPERATION_TIMEDOUT)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("LLM request to \"%s\" timed out after %ld ms", url, elapsed_ms),
				 errhint("\"ctxwin.llm_timeout_ms\" is %d.", ctxwin_llm_timeout_ms)));
	if (rc != CURLE_OK && status != 0)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("LLM endpoint \"%s\" broke off its answer: %s", url,
						errbuf[0] ? errbuf : curl_easy_strerror(rc)),
				 errdetail("HTTP status was %ld; %zu bytes had arrived.", status, body.len)));
	if (rc != CURLE_OK)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not reach LLM endpoint \"%s\": %s", url,
						errbuf[0] ? errbuf : curl_easy_strerror(rc))));
	if (strlen(resp) != body.len)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("LLM endpoint returned a body with a zero byte"),
				 errdetail("HTTP status was %ld.", status)));
	is_error = status < 200 || status > 299;
	json_ok = pg_strncasecmp(rh.content_type, "application/json", 16) == 0;
	if (!json_ok && !is_error)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("LLM endpoint returned content type \"%s\", not JSON", rh.content_type),
				 errdetail("HTTP status was %ld.", status)));
	if (json_ok)
	{
		if (GetDatabaseEncoding() != PG_UTF8)
		{
			resp = pg_any_to_server(resp, (int) body.len, PG_UTF8);
			body.len = strlen(resp);
		}
		lex = makeJsonLexContextCstringLen(resp, (int) body.len, GetDatabaseEncoding(), false);
		json_ok = pg_parse_json(lex, &nullSemAction) == JSON_SUCCESS;
		if (!json_ok && !is_error)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
					 errmsg("LLM endpoint returned malformed JSON"),
					 errdetail("HTTP status was %ld; the body was %zu bytes.", status, body.len)));
	}
	if (!json_ok)
	{
		/*
		 * An error status whose body is not JSON, such as a proxy's HTML
		 * page for a 502: the status is what the caller acts on (5xx are
		 * retried), so return it with a short description as the body.
		 */
		StringInfoData d;
		const char *c;

		initStringInfo(&d);
		appendStringInfoString(&d, "answer not JSON: ");
		for (c = rh.content_type; *c; c++)
			if (*c >= 0x20 && *c < 0x7f && *c != '"' && *c != '\\')
				appendStringInfoChar(&d, *c);
		if (rh.content_type[0] == '\0')
			appendStringInfoString(&d, "no content type");
		appendStringInfo(&d, ", %zu bytes", body.len);
		initStringInfo(&out);
		escape_json(&out, d.data);
		resp = out.data;
		body.len = out.len;
	}

	initStringInfo(&out);
	appendStringInfo(&out, "{\"status\": %ld, \"latency_ms\": %ld, \"provider\": ", status, elapsed_ms);
	escape_json(&out, ProviderName());
	appendStringInfoString(&out, ", \"retry_after\": ");
	if (rh.retry_after[0])
		escape_json(&out, rh.retry_after);
	else
		appendStringInfoString(&out, "null");
	appendStringInfoString(&out, ", \"body\": ");
	appendBinaryStringInfo(&out, resp, body.len);
	appendStringInfoChar(&out, '}');
	PG_RETURN_DATUM(DirectFunctionCall1(jsonb_in, CStringGetDatum(out.data)));
}
