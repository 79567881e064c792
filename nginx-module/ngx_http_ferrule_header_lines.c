/*
 * ferrule_header_lines $NAME $FIRST [HEADER $VARIABLE]...;
 *                 http: $NAME reads as $FIRST's value followed, for every
 *                 HEADER whose variable is not empty, by "\r\nHEADER: value".
 *
 * For `proxy_set_header X-Real-IP $NAME;`: the one header line NGINX writes
 * then carries the others, each written as `proxy_set_header HEADER
 * $VARIABLE;` would write it (a header whose value is empty is not sent), and
 * `proxy_set_header HEADER "";` for each keeps the client's copies from the
 * backend at no cost per request.
 *
 * Why: the proxy module builds every header from its script twice over (the
 * length, then the bytes), a variable lookup and a handful of indirect calls
 * per header. ingress-nginx's headers are eleven; building nine of them as
 * one header's value saves about 1.2 % of a small proxied request's CPU
 * (test/bench/RESULTS.md). What they still cost is their values and bytes.
 *
 * A value holding CR, LF or NUL (none that NGINX parsed from a request can;
 * a snippet's `set` could) is not written, so no value can add a line.
 *
 * The variable is flushed (recomputed) wherever the proxy module builds a
 * request, as any variable that is not cacheable, so an error page's `set`
 * of one of the variables after an internal redirect is read; within one
 * build both passes share one value.
 */

#include "ngx_http_ferrule_module.h"


/* headers one variable carries, at most */
#define NGX_HTTP_FERRULE_HEADER_LINES_MAX  32


typedef struct {
    ngx_str_t    name;          /* the header's name, "" for $FIRST */
    ngx_int_t    index;
} ngx_http_ferrule_header_line_t;


typedef struct {
    ngx_uint_t                        n;
    ngx_http_ferrule_header_line_t   *lines;
} ngx_http_ferrule_header_lines_t;


static ngx_int_t ngx_http_ferrule_header_lines_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);


/* a token (RFC 9110), as a header name must be */
static ngx_int_t
ngx_http_ferrule_header_name(ngx_str_t *name)
{
    u_char      c;
    ngx_uint_t  i;

    if (name->len == 0) {
        return NGX_ERROR;
    }

    for (i = 0; i < name->len; i++) {
        c = name->data[i];

        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
            || (c >= '0' && c <= '9')
            || ngx_strchr("!#$%&'*+-.^_`|~", c) != NULL)
        {
            continue;
        }

        return NGX_ERROR;
    }

    return NGX_OK;
}


char *
ngx_http_ferrule_header_lines(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_str_t                        *value, name;
    ngx_uint_t                        i;
    ngx_http_variable_t              *v;
    ngx_http_ferrule_header_line_t   *line;
    ngx_http_ferrule_header_lines_t  *lines;

    value = cf->args->elts;

    /* $NAME $FIRST, then pairs */
    if (cf->args->nelts % 2 != 1) {
        return "takes a header name and a variable for each header";
    }

    if (ngx_http_ferrule_variable_name(cf, cmd, &value[1], &name) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    lines = ngx_palloc(cf->pool, sizeof(ngx_http_ferrule_header_lines_t));
    if (lines == NULL) {
        return NGX_CONF_ERROR;
    }

    lines->n = (cf->args->nelts - 1) / 2;
    if (lines->n > NGX_HTTP_FERRULE_HEADER_LINES_MAX) {
        return "takes at most 32 headers";
    }

    lines->lines = ngx_pcalloc(cf->pool,
                           lines->n * sizeof(ngx_http_ferrule_header_line_t));
    if (lines->lines == NULL) {
        return NGX_CONF_ERROR;
    }

    for (i = 0; i < lines->n; i++) {
        line = &lines->lines[i];

        if (i > 0) {
            line->name = value[2 * i + 1];
            if (ngx_http_ferrule_header_name(&line->name) != NGX_OK) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "\"%V\" is not a header name",
                                   &line->name);
                return NGX_CONF_ERROR;
            }
        }

        line->index = ngx_http_ferrule_variable_arg(cf, cmd, &value[2 * i + 2],
                                                    &name);
        if (line->index == NGX_ERROR) {
            return NGX_CONF_ERROR;
        }
    }

    v = ngx_http_add_variable(cf, &name, NGX_HTTP_VAR_NOCACHEABLE);
    if (v == NULL) {
        return NGX_CONF_ERROR;
    }

    v->get_handler = ngx_http_ferrule_header_lines_variable;
    v->data = (uintptr_t) lines;

    return NGX_CONF_OK;
}


/* whether a value may go on a header line as it is */
static ngx_inline ngx_uint_t
ngx_http_ferrule_header_value_ok(ngx_http_variable_value_t *v)
{
    u_char    *p, *end;
    uint64_t   w;

    p = v->data;
    end = p + v->len;

    for ( /* void */ ; end - p >= 8; p += 8) {
        ngx_memcpy(&w, p, 8);

        if (ngx_http_ferrule_has_zero(w) | ngx_http_ferrule_has_byte(w, CR)
            | ngx_http_ferrule_has_byte(w, LF))
        {
            return 0;
        }
    }

    for ( /* void */ ; p < end; p++) {
        if (*p == CR || *p == LF || *p == '\0') {
            return 0;
        }
    }

    return 1;
}


static ngx_int_t
ngx_http_ferrule_header_lines_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_http_ferrule_header_lines_t *lines =
        (ngx_http_ferrule_header_lines_t *) data;

    u_char                          *p;
    size_t                           len;
    ngx_uint_t                       i;
    ngx_http_variable_value_t       *val;
    ngx_http_ferrule_header_line_t  *line;
    ngx_http_variable_value_t       *vals[NGX_HTTP_FERRULE_HEADER_LINES_MAX];

    len = 0;

    for (i = 0; i < lines->n; i++) {
        line = &lines->lines[i];

        val = ngx_http_get_indexed_variable(r, line->index);
        if (val == NULL) {
            return NGX_ERROR;
        }

        if (val->not_found || val->len == 0
            || !ngx_http_ferrule_header_value_ok(val))
        {
            vals[i] = NULL;
            continue;
        }

        vals[i] = val;
        len += val->len;

        if (i > 0) {
            len += sizeof(CRLF ": ") - 1 + line->name.len;
        }
    }

    p = ngx_pnalloc(r->pool, len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    v->data = p;

    for (i = 0; i < lines->n; i++) {
        if (vals[i] == NULL) {
            continue;
        }

        if (i > 0) {
            *p++ = CR; *p++ = LF;
            p = ngx_cpymem(p, lines->lines[i].name.data,
                           lines->lines[i].name.len);
            *p++ = ':'; *p++ = ' ';
        }

        p = ngx_cpymem(p, vals[i]->data, vals[i]->len);
    }

    v->len = p - v->data;
    v->valid = 1;
    /* both passes of one request build read one value; the proxy module
       flushes it before the next build (the variable is not cacheable) */
    v->no_cacheable = 0;
    v->not_found = 0;

    return NGX_OK;
}
