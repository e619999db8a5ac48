/*
 * llm.c
 *		The LLM client: one HTTP POST of a JSON body to the configured
 *		provider, with libcurl, from a backend.  Where it goes and with
 *		which headers is the provider's (provider.h, a file each).
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
 * A request that could not be carried out (no connection, a timeout, an
 * answer broken off) is connection_failure (08006), which _llm_summarize
 * catches to send it again; an answer that cannot be read (not JSON, a zero
 * byte) is external_routine_exception (38000), as every answer
 * _llm_answer refuses is.
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

#include "base/base.h"
#include "citus/citus.h"
#include "compat/compat.h"
#include "tokenizer/tokenizer.h"
#include "llm/llm.h"
#include "llm/provider.h"

#define MIN_LIBCURL_VERSION_NUM 0x075500	/* 7.85.0: CURLOPT_PROTOCOLS_STR */
_Static_assert(LIBCURL_VERSION_NUM >= MIN_LIBCURL_VERSION_NUM,
			   "ctxwin needs libcurl 7.85.0 or later");

PG_FUNCTION_INFO_V1(ctxwin_llm_post);

static bool curl_ready = false;

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
 * the key, and the file's path goes to the server log only (errdetail_log):
 * inside a SECURITY DEFINER function superuser() is true for any caller.
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
					 errdetail_log("File \"%s\": %m.", ctxwin_llm_api_key_file),
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

/*
 * The endpoint URL of a request to a provider, palloc'd, and the body to
 * send (the provider's url() may move the model out of it).
 */
static char *
EndpointUrl(const LlmProvider *p, char **body)
{
	const char *base = ctxwin_llm_base_url;
	size_t		n;

	if (base == NULL || base[0] == '\0')
		base = p->base_url;
	n = strlen(base);
	while (n > 0 && base[n - 1] == '/')
		n--;
	return p->url(pnstrdup(base, n), body);
}

void
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
 * A transfer: one POST of a JSON body to the configured endpoint, set up on
 * a curl easy handle that the caller runs (curl_easy_perform, or a multi
 * handle).  Everything curl holds is released by LlmTransferFree, which
 * LlmTransferResult calls before it reports anything.
 */
struct LlmTransfer
{
	CURL	   *h;
	struct curl_slist *hdrs;
	char	   *request;		/* palloc'd JSON text */
	char	   *url;			/* palloc'd */
	char	   *auth;			/* palloc'd header with the key, zeroed on free */
	Body		body;
	Headers		rh;
	char		errbuf[CURL_ERROR_SIZE];
	TimestampTz start;
	const LlmProvider *provider;
	int			timeout_ms;
	int			max_response_bytes;
};

/*
 * Sets up a transfer of request (JSON text) with the settings in effect now.
 * Raises an error, holding nothing, when no provider is configured, the
 * settings are tainted or the key cannot be read.
 */
LlmTransfer *
LlmTransferCreate(const char *request)
{
	LlmTransfer *t;
	const LlmProvider *p = LlmProviderConfigured();
	char	   *key;

	if (ctxwin_llm_settings_tainted)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("LLM settings of this connection were set by a role that may not set them"),
				 errdetail("The server's values of the superuser-only ctxwin.llm_* settings were replaced before ctxwin was loaded."),
				 errhint("Reconnect without those settings in the connection options, or load ctxwin via \"shared_preload_libraries\".")));
	EnsureCurl();

	t = palloc0(sizeof(LlmTransfer));
	t->request = pstrdup(request);
	t->url = EndpointUrl(p, &t->request);
	t->provider = p;
	t->timeout_ms = ctxwin_llm_timeout_ms;
	t->max_response_bytes = ctxwin_llm_max_response_bytes;
	t->body.limit = (size_t) ctxwin_llm_max_response_bytes;
	key = ReadApiKey();
	if (key)
	{
		t->auth = p->auth(key);
		explicit_bzero(key, strlen(key));
		pfree(key);
	}

	PG_TRY();
	{
		struct curl_slist *l = NULL;
		CURL	   *h;

		h = t->h = curl_easy_init();
		if (h == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("could not create a libcurl handle")));
		l = curl_slist_append(l, "Content-Type: application/json");
		if (l && p->header)
			l = curl_slist_append(l, p->header);
		if (l && t->auth)
			l = curl_slist_append(l, t->auth);
		t->hdrs = l;
		if (l == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("out of memory building the LLM request")));
		curl_easy_setopt(h, CURLOPT_URL, t->url);
		curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
		curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
		curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(h, CURLOPT_HTTPHEADER, l);
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, t->request);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long) strlen(t->request));
		curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long) t->timeout_ms);
		curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long) Min(t->timeout_ms, 10000));
		curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, WriteBody);
		curl_easy_setopt(h, CURLOPT_WRITEDATA, &t->body);
		curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, WriteHeader);
		curl_easy_setopt(h, CURLOPT_HEADERDATA, &t->rh);
		curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, Progress);
		curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
		curl_easy_setopt(h, CURLOPT_ERRORBUFFER, t->errbuf);
		curl_easy_setopt(h, CURLOPT_USERAGENT, "ctxwin/" CTXWIN_VERSION);
		curl_easy_setopt(h, CURLOPT_PRIVATE, t);
	}
	PG_CATCH();
	{
		LlmTransferFree(t);
		PG_RE_THROW();
	}
	PG_END_TRY();
	t->start = GetCurrentTimestamp();
	return t;
}

/* The curl easy handle of a transfer, to run it. */
void *
LlmTransferHandle(LlmTransfer *t)
{
	return t->h;
}

/* Releases what curl holds for a transfer (idempotent); the struct stays. */
void
LlmTransferFree(LlmTransfer *t)
{
	if (t->hdrs)
		curl_slist_free_all(t->hdrs);
	t->hdrs = NULL;
	if (t->h)
		curl_easy_cleanup(t->h);
	t->h = NULL;
	if (t->auth)
		explicit_bzero(t->auth, strlen(t->auth));
	free(t->body.data);
	t->body.data = NULL;
}

/*
 * The outcome of a finished transfer (rc: what curl_easy_perform or the
 * multi handle's message said), as the jsonb
 * {"status": int, "latency_ms": int, "provider": text, "retry_after": text,
 *  "body": jsonb}
 * for any HTTP answer whose body is JSON (error statuses included, so the
 * caller can tell 429 from 400), and for an error status whose body is not
 * JSON (a proxy's 502 page; "body" is then a JSON string saying so).  Raises
 * an error for everything else: connection failure, timeout, cancel, an
 * answer over the size limit, a 2xx answer that is not JSON or is
 * malformed.  Frees the transfer's curl resources first, in every case.
 */
Jsonb *
LlmTransferResult(LlmTransfer *t, int curl_code)
{
	CURLcode	rc = (CURLcode) curl_code;
	long		status = 0;
	char	   *resp;
	size_t		len;
	long		elapsed_ms;
	JsonLexContext *lex;
	StringInfoData out;
	bool		is_error;
	bool		json_ok;
	bool		overflow = t->body.overflow;
	bool		oom = t->body.oom;

	if (t->h)
		curl_easy_getinfo(t->h, CURLINFO_RESPONSE_CODE, &status);
	/* from here on nothing of curl is held; move the body to palloc */
	len = t->body.len;
	resp = t->body.data ? pnstrdup(t->body.data, len) : pstrdup("");
	LlmTransferFree(t);
	elapsed_ms = (long) ((GetCurrentTimestamp() - t->start) / 1000);

	if (rc == CURLE_ABORTED_BY_CALLBACK)
	{
		CHECK_FOR_INTERRUPTS();
		/* not reached unless the interrupt was already serviced */
		ereport(ERROR,
				(errcode(ERRCODE_QUERY_CANCELED),
				 errmsg("LLM request canceled")));
	}
	if (overflow)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("LLM answer is larger than %d bytes", t->max_response_bytes),
				 errhint("Raise \"ctxwin.llm_max_response_bytes\" if answers this large are expected.")));
	if (oom)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory reading the LLM answer")));
	if (rc == CURLE_OPERATION_TIMEDOUT)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("LLM request to \"%s\" timed out after %ld ms", t->url, elapsed_ms),
				 errhint("\"ctxwin.llm_timeout_ms\" is %d.", t->timeout_ms)));
	if (rc != CURLE_OK && status != 0)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("LLM endpoint \"%s\" broke off its answer: %s", t->url,
						t->errbuf[0] ? t->errbuf : curl_easy_strerror(rc)),
				 errdetail("HTTP status was %ld; %zu bytes had arrived.", status, len)));
	if (rc != CURLE_OK)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not reach LLM endpoint \"%s\": %s", t->url,
						t->errbuf[0] ? t->errbuf : curl_easy_strerror(rc))));
	if (strlen(resp) != len)
		ereport(ERROR,
				(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
				 errmsg("LLM endpoint returned a body with a zero byte"),
				 errdetail("HTTP status was %ld.", status)));
	is_error = status < 200 || status > 299;
	json_ok = pg_strncasecmp(t->rh.content_type, "application/json", 16) == 0;
	if (!json_ok && !is_error)
		ereport(ERROR,
				(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
				 errmsg("LLM endpoint returned content type \"%s\", not JSON", t->rh.content_type),
				 errdetail("HTTP status was %ld.", status)));
	if (json_ok)
	{
		if (GetDatabaseEncoding() != PG_UTF8)
		{
			resp = pg_any_to_server(resp, (int) len, PG_UTF8);
			len = strlen(resp);
		}
		lex = makeJsonLexContextCstringLen_compat(resp, len, GetDatabaseEncoding(), false);
		json_ok = pg_parse_json(lex, &nullSemAction) == JSON_SUCCESS;
		if (!json_ok && !is_error)
			ereport(ERROR,
					(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
					 errmsg("LLM endpoint returned malformed JSON"),
					 errdetail("HTTP status was %ld; the body was %zu bytes.", status, len)));
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
		for (c = t->rh.content_type; *c; c++)
			if (*c >= 0x20 && *c < 0x7f && *c != '"' && *c != '\\')
				appendStringInfoChar(&d, *c);
		if (t->rh.content_type[0] == '\0')
			appendStringInfoString(&d, "no content type");
		appendStringInfo(&d, ", %zu bytes", len);
		initStringInfo(&out);
		escape_json(&out, d.data);
		resp = out.data;
		len = out.len;
	}

	/* a wait the provider asks for in its error's body, not in a header */
	if (is_error && json_ok && t->rh.retry_after[0] == '\0' && t->provider->retry_after)
	{
		Jsonb	   *b = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(resp)));
		char	   *ra = JB_ROOT_IS_OBJECT(b) ? t->provider->retry_after(&b->root) : NULL;

		if (ra)
			strlcpy(t->rh.retry_after, ra, sizeof(t->rh.retry_after));
	}

	initStringInfo(&out);
	appendStringInfo(&out, "{\"status\": %ld, \"latency_ms\": %ld, \"provider\": ", status, elapsed_ms);
	escape_json(&out, t->provider->name);
	appendStringInfoString(&out, ", \"retry_after\": ");
	if (t->rh.retry_after[0])
		escape_json(&out, t->rh.retry_after);
	else
		appendStringInfoString(&out, "null");
	appendStringInfoString(&out, ", \"body\": ");
	appendBinaryStringInfo(&out, resp, len);
	appendStringInfoChar(&out, '}');
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(out.data)));
}

/*
 * _llm_post(body jsonb) returns jsonb
 *
 * POSTs body to the configured provider's endpoint, in this backend, and
 * returns LlmTransferResult's jsonb, or raises its error.
 */
Datum
ctxwin_llm_post(PG_FUNCTION_ARGS)
{
	Jsonb	   *body_jb = PG_GETARG_JSONB_P(0);
	char	   *request = JsonbToCString(NULL, &body_jb->root, VARSIZE(body_jb));
	LlmTransfer *t = LlmTransferCreate(request);
	CURLcode	rc;

	/* curl calls no ereport: the callbacks only record and return */
	rc = curl_easy_perform(t->h);
	PG_RETURN_JSONB_P(LlmTransferResult(t, (int) rc));
}
