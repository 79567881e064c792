/*
 * ferrule_upstreaminfo $NAME $BACKEND $REQUEST_ID;
 *                 http: $NAME reads as the line that
 *
 *   log_format upstreaminfo '$remote_addr - $remote_user [$time_local] '
 *       '"$request" $status $body_bytes_sent "$http_referer" '
 *       '"$http_user_agent" $request_length $request_time [$BACKEND] [] '
 *       '$upstream_addr $upstream_response_length $upstream_response_time '
 *       '$upstream_status $REQUEST_ID';
 *
 *                 writes (ingress-nginx's upstreaminfo, Ferrule's default),
 *                 byte for byte, escapes included: for
 *                 `log_format upstreaminfo escape=none '$NAME';`.
 *
 * The log module writes a format op by op, twice over (every op's length, then
 * every op's bytes), each variable looked up twice and scanned twice for bytes
 * to escape, each number through ngx_sprintf. This format's line cost 3-4 %
 * of a small proxied request's CPU, a constant line next to nothing
 * (test/bench/RESULTS.md). Here the line is one function: the same values,
 * read once, escaped as the log module escapes them, numbers written by hand,
 * about 1 % of a request less. What is left is the values and the bytes.
 *
 * Only the log phase should read $NAME (it is the request's line as it ends).
 */

#include "ngx_http_ferrule_module.h"


/* the variables of the line, in its order */
enum {
    ngx_http_ferrule_ui_remote_addr = 0,
    ngx_http_ferrule_ui_remote_user,
    ngx_http_ferrule_ui_request,
    ngx_http_ferrule_ui_referer,
    ngx_http_ferrule_ui_user_agent,
    ngx_http_ferrule_ui_backend,
    ngx_http_ferrule_ui_upstream_addr,
    ngx_http_ferrule_ui_upstream_length,
    ngx_http_ferrule_ui_upstream_time,
    ngx_http_ferrule_ui_upstream_status,
    ngx_http_ferrule_ui_request_id,
    ngx_http_ferrule_ui_n
};


/* NGINX's own variables among them (the empty ones are the directive's) */
static ngx_str_t  ngx_http_ferrule_ui_names[] = {
    ngx_string("remote_addr"),
    ngx_string("remote_user"),
    ngx_string("request"),
    ngx_string("http_referer"),
    ngx_string("http_user_agent"),
    ngx_null_string,
    ngx_string("upstream_addr"),
    ngx_string("upstream_response_length"),
    ngx_string("upstream_response_time"),
    ngx_string("upstream_status"),
    ngx_null_string
};


/* the line's constant text, at most, besides its values */
#define NGX_HTTP_FERRULE_UI_TEXT  64


typedef struct {
    ngx_int_t   index[ngx_http_ferrule_ui_n];
} ngx_http_ferrule_upstreaminfo_t;


static ngx_int_t ngx_http_ferrule_upstreaminfo_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);


/* the log module's default escaping: \xHH for ", \, controls and non-ASCII */
static uint32_t  ngx_http_ferrule_ui_escape[] = {
    0xffffffff, 0x00000004, 0x10000000, 0x80000000,
    0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff
};


#define ngx_http_ferrule_ui_escaped(c)                                       \
    (ngx_http_ferrule_ui_escape[(c) >> 5] & (1U << ((c) & 0x1f)))


char *
ngx_http_ferrule_upstreaminfo(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_str_t                        *value, name;
    ngx_uint_t                        i;
    ngx_http_variable_t              *v;
    ngx_http_ferrule_upstreaminfo_t  *info;

    value = cf->args->elts;

    if (ngx_http_ferrule_variable_name(cf, cmd, &value[1], &name) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    info = ngx_palloc(cf->pool, sizeof(ngx_http_ferrule_upstreaminfo_t));
    if (info == NULL) {
        return NGX_CONF_ERROR;
    }

    for (i = 0; i < ngx_http_ferrule_ui_n; i++) {
        if (i == ngx_http_ferrule_ui_backend) {
            info->index[i] = ngx_http_ferrule_variable_arg(cf, cmd, &value[2],
                                                           &name);

        } else if (i == ngx_http_ferrule_ui_request_id) {
            info->index[i] = ngx_http_ferrule_variable_arg(cf, cmd, &value[3],
                                                           &name);

        } else {
            info->index[i] = ngx_http_get_variable_index(cf,
                                                 &ngx_http_ferrule_ui_names[i]);
        }

        if (info->index[i] == NGX_ERROR) {
            return NGX_CONF_ERROR;
        }
    }

    v = ngx_http_add_variable(cf, &name, NGX_HTTP_VAR_NOCACHEABLE);
    if (v == NULL) {
        return NGX_CONF_ERROR;
    }

    v->get_handler = ngx_http_ferrule_upstreaminfo_variable;
    v->data = (uintptr_t) info;

    return NGX_CONF_OK;
}


/* how many bytes of src the log module would escape */
static size_t
ngx_http_ferrule_ui_escapes(u_char *src, size_t size)
{
    size_t    n;
    uint64_t  w;

    n = 0;

    /* a word of printable ASCII without " or \ (almost every one) at once */
    for ( /* void */ ; size >= 8; size -= 8, src += 8) {
        ngx_memcpy(&w, src, 8);

        if (ngx_http_ferrule_has_less(w, 0x20) | ngx_http_ferrule_has_high(w)
            | ngx_http_ferrule_has_byte(w, '"')
            | ngx_http_ferrule_has_byte(w, '\\'))
        {
            break;
        }
    }

    for ( /* void */ ; size; size--, src++) {
        if (ngx_http_ferrule_ui_escaped(*src)) {
            n++;
        }
    }

    return n;
}


static u_char *
ngx_http_ferrule_ui_value(u_char *p, ngx_http_variable_value_t *v)
{
    static u_char  hex[] = "0123456789ABCDEF";

    u_char  *src, *end;

    if (v->not_found) {
        *p++ = '-';
        return p;
    }

    if (!v->escape) {
        return ngx_cpymem(p, v->data, v->len);
    }

    for (src = v->data, end = src + v->len; src < end; src++) {
        if (ngx_http_ferrule_ui_escaped(*src)) {
            *p++ = '\\';
            *p++ = 'x';
            *p++ = hex[*src >> 4];
            *p++ = hex[*src & 0xf];

        } else {
            *p++ = *src;
        }
    }

    return p;
}


/* n in decimal, at least `width` digits (as ngx_sprintf's "%0Nui") */
static u_char *
ngx_http_ferrule_ui_number(u_char *p, uint64_t n, ngx_uint_t width)
{
    u_char   digits[NGX_INT64_LEN], *d;

    d = digits + NGX_INT64_LEN;

    do {
        *--d = (u_char) ('0' + n % 10);
        n /= 10;
    } while (n);

    while ((ngx_uint_t) (digits + NGX_INT64_LEN - d) < width) {
        *--d = '0';
    }

    return ngx_cpymem(p, d, digits + NGX_INT64_LEN - d);
}


/*
 * The upstream's address, response length, response time and status: a
 * request that went to one peer (almost all) from its state, as the four
 * variables write it; one that went to several, or through an internal
 * redirect, through the variables.
 */
static ngx_http_upstream_state_t *
ngx_http_ferrule_ui_one_peer(ngx_http_request_t *r)
{
    ngx_http_upstream_state_t  *state;

    if (r->upstream_states == NULL || r->upstream_states->nelts != 1) {
        return NULL;
    }

    state = r->upstream_states->elts;

    if (state->peer == NULL || state->response_length < 0) {
        return NULL;
    }

    return state;
}


static u_char *
ngx_http_ferrule_ui_msec(u_char *p, ngx_msec_int_t ms)
{
    ms = ngx_max(ms, 0);
    p = ngx_http_ferrule_ui_number(p, (uint64_t) ms / 1000, 1);
    *p++ = '.';
    return ngx_http_ferrule_ui_number(p, (uint64_t) ms % 1000, 3);
}


static ngx_int_t
ngx_http_ferrule_upstreaminfo_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_http_ferrule_upstreaminfo_t *info =
        (ngx_http_ferrule_upstreaminfo_t *) data;

    off_t                       sent;
    u_char                     *line, *p;
    size_t                      len, n;
    ngx_uint_t                  i, status;
    ngx_time_t                 *tp;
    ngx_msec_int_t              ms;
    ngx_http_upstream_state_t  *peer;
    ngx_http_variable_value_t  *val[ngx_http_ferrule_ui_n];
    ngx_http_variable_value_t   peer_addr;

    len = NGX_HTTP_FERRULE_UI_TEXT + ngx_cached_http_log_time.len
          + NGX_INT_T_LEN + 2 * NGX_OFF_T_LEN + NGX_TIME_T_LEN + 4;

    peer = ngx_http_ferrule_ui_one_peer(r);

    if (peer) {
        peer_addr.data = peer->peer->data;
        peer_addr.len = peer->peer->len;
        peer_addr.not_found = 0;
        val[ngx_http_ferrule_ui_upstream_addr] = &peer_addr;
        len += NGX_OFF_T_LEN + NGX_TIME_T_LEN + 4 + NGX_INT_T_LEN;
    }

    for (i = 0; i < ngx_http_ferrule_ui_n; i++) {
        if (peer && i >= ngx_http_ferrule_ui_upstream_addr
            && i <= ngx_http_ferrule_ui_upstream_status)
        {
            if (i != ngx_http_ferrule_ui_upstream_addr) {
                continue;
            }

        } else {
            val[i] = ngx_http_get_indexed_variable(r, info->index[i]);
            if (val[i] == NULL) {
                return NGX_ERROR;
            }
        }

        if (val[i]->not_found) {
            len++;
            continue;
        }

        n = ngx_http_ferrule_ui_escapes(val[i]->data, val[i]->len);
        val[i]->escape = n ? 1 : 0;
        len += val[i]->len + 3 * n;
    }

    line = ngx_pnalloc(r->pool, len);
    if (line == NULL) {
        return NGX_ERROR;
    }

    p = ngx_http_ferrule_ui_value(line, val[ngx_http_ferrule_ui_remote_addr]);
    p = ngx_cpymem(p, " - ", 3);
    p = ngx_http_ferrule_ui_value(p, val[ngx_http_ferrule_ui_remote_user]);
    p = ngx_cpymem(p, " [", 2);
    p = ngx_cpymem(p, ngx_cached_http_log_time.data,
                   ngx_cached_http_log_time.len);
    p = ngx_cpymem(p, "] \"", 3);
    p = ngx_http_ferrule_ui_value(p, val[ngx_http_ferrule_ui_request]);
    p = ngx_cpymem(p, "\" ", 2);

    /* the log module's $status, $body_bytes_sent, $request_length and
       $request_time, as it writes them */
    if (r->err_status) {
        status = r->err_status;

    } else if (r->headers_out.status) {
        status = r->headers_out.status;

    } else if (r->http_version == NGX_HTTP_VERSION_9) {
        status = 9;

    } else {
        status = 0;
    }

    p = ngx_http_ferrule_ui_number(p, status, 3);
    *p++ = ' ';

    sent = r->connection->sent - r->header_size;
    p = ngx_http_ferrule_ui_number(p, sent > 0 ? (uint64_t) sent : 0, 1);

    p = ngx_cpymem(p, " \"", 2);
    p = ngx_http_ferrule_ui_value(p, val[ngx_http_ferrule_ui_referer]);
    p = ngx_cpymem(p, "\" \"", 3);
    p = ngx_http_ferrule_ui_value(p, val[ngx_http_ferrule_ui_user_agent]);
    p = ngx_cpymem(p, "\" ", 2);

    p = ngx_http_ferrule_ui_number(p, r->request_length > 0
                                      ? (uint64_t) r->request_length : 0, 1);
    *p++ = ' ';

    tp = ngx_timeofday();
    ms = (ngx_msec_int_t)
             ((tp->sec - r->start_sec) * 1000 + (tp->msec - r->start_msec));
    p = ngx_http_ferrule_ui_msec(p, ms);

    p = ngx_cpymem(p, " [", 2);
    p = ngx_http_ferrule_ui_value(p, val[ngx_http_ferrule_ui_backend]);
    p = ngx_cpymem(p, "] [] ", 5);
    p = ngx_http_ferrule_ui_value(p, val[ngx_http_ferrule_ui_upstream_addr]);
    *p++ = ' ';

    if (peer) {
        /* as the variables: "%O", "%T.%03M" or "-", "%ui" or "-" */
        p = ngx_http_ferrule_ui_number(p, (uint64_t) peer->response_length,
                                       1);
        *p++ = ' ';

        if (peer->response_time != (ngx_msec_t) -1) {
            p = ngx_http_ferrule_ui_msec(p,
                                     (ngx_msec_int_t) peer->response_time);
        } else {
            *p++ = '-';
        }

        *p++ = ' ';

        if (peer->status) {
            p = ngx_http_ferrule_ui_number(p, peer->status, 1);
        } else {
            *p++ = '-';
        }

    } else {
        p = ngx_http_ferrule_ui_value(p,
                                   val[ngx_http_ferrule_ui_upstream_length]);
        *p++ = ' ';
        p = ngx_http_ferrule_ui_value(p,
                                     val[ngx_http_ferrule_ui_upstream_time]);
        *p++ = ' ';
        p = ngx_http_ferrule_ui_value(p,
                                   val[ngx_http_ferrule_ui_upstream_status]);
    }

    *p++ = ' ';
    p = ngx_http_ferrule_ui_value(p, val[ngx_http_ferrule_ui_request_id]);

    v->len = p - line;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;
    v->data = line;

    return NGX_OK;
}
