/*
 * The request's headers as the backend is to see them.
 *
 *   ferrule_drop_lookalikes NAME...;
 *                             http, server, location: a client's header whose
 *                             name is one of NAMEs once case is ignored and "_"
 *                             reads as "-" (X_Forwarded_For), but not the name
 *                             itself, is dropped from the request (the names add
 *                             up from http to location)
 *
 * Ferrule sets X-Forwarded-For, X-Real-IP and the others to the backend, which
 * replaces the client's copies of those names. With underscores_in_headers on
 * (ConfigMap enable-underscores-in-headers) or ignore_invalid_headers off, a
 * client's X_Forwarded_For is another name to NGINX and reaches the backend
 * beside Ferrule's header, while CGI, Rack, WSGI and the like turn both into
 * HTTP_X_FORWARDED_FOR, and may read the client's (the class of Puma's
 * CVE-2024-45614). The template names every header Ferrule sets; this drops
 * their lookalikes in the rewrite phase, before any subrequest copies the
 * headers and before the proxy module reads them.
 *
 * Removing a request header (here, and for ferrule_input_header): marking a
 * header deleted (hash 0) hides it from NGINX's variables and from realip, not
 * from the proxy module, which sends every header of the list that it does not
 * set itself: a header the backend must not see is taken out of the list,
 * without moving any other, as NGINX keeps pointers to some of them
 * (r->headers_in.host, ...).
 */

#include "ngx_http_ferrule_module.h"


/* a name: lowercased as configured, and with "_" read as "-" */
typedef struct {
    ngx_str_t                        lower;
    ngx_str_t                        norm;
} ngx_http_ferrule_lookalike_t;


static ngx_int_t ngx_http_ferrule_lookalikes_handler(ngx_http_request_t *r);


/*
 * The request's header at `c`, moving `c` over the ends of parts; NULL past
 * the last. Start with a zeroed cursor.
 */
ngx_table_elt_t *
ngx_http_ferrule_header_at(ngx_http_request_t *r,
    ngx_http_ferrule_cursor_t *c)
{
    if (c->part == NULL) {
        c->part = &r->headers_in.headers.part;
        c->prev = NULL;
        c->i = 0;
    }

    while (c->i >= c->part->nelts) {
        if (c->part->next == NULL) {
            return NULL;
        }
        c->prev = c->part;
        c->part = c->part->next;
        c->i = 0;
    }

    return (ngx_table_elt_t *) c->part->elts + c->i;
}


/*
 * Removes the header at `c` from the request's list, without moving any other
 * (NGINX's pointers to them stay right); `c` is then at the one after it. As
 * NGINX iterates a list, no part but the first may be empty, and the last part
 * must have room for l->nalloc elements from its start: a part's elements
 * after the removed one become a part of their own, a part left empty is
 * unlinked, and l->nalloc follows the last part's room.
 */
ngx_int_t
ngx_http_ferrule_remove_header(ngx_http_request_t *r,
    ngx_http_ferrule_cursor_t *c)
{
    ngx_list_t       *l;
    ngx_list_part_t  *part, *rest;

    l = &r->headers_in.headers;
    part = c->part;

    if (part->nelts == 1) {

        if (c->prev == NULL) {
            /* the first part may be empty */
            part->nelts = 0;
            return NGX_OK;
        }

        c->prev->next = part->next;

        if (l->last == part) {
            l->last = c->prev;

            if (c->prev->nelts) {
                /* the part before may have no room after its elements: full */
                l->nalloc = c->prev->nelts;

            } else {
                /* the empty first part is all that is left: room of its own */
                c->prev->elts = ngx_palloc(r->pool, l->nalloc * l->size);
                if (c->prev->elts == NULL) {
                    return NGX_ERROR;
                }
            }
        }

        if (part->next) {
            c->part = part->next;
            c->i = 0;

        } else {
            /* past the last: ngx_http_ferrule_header_at ends there */
            c->part = c->prev;
            c->i = c->prev->nelts;
        }

        return NGX_OK;
    }

    if (c->i + 1 == part->nelts) {
        part->nelts--;
        return NGX_OK;
    }

    if (c->i == 0) {
        part->elts = (u_char *) part->elts + l->size;
        part->nelts--;

        if (l->last == part) {
            l->nalloc--;
        }

        return NGX_OK;
    }

    rest = ngx_palloc(r->pool, sizeof(ngx_list_part_t));
    if (rest == NULL) {
        return NGX_ERROR;
    }

    rest->elts = (u_char *) part->elts + (c->i + 1) * l->size;
    rest->nelts = part->nelts - c->i - 1;
    rest->next = part->next;

    part->nelts = c->i;
    part->next = rest;

    if (l->last == part) {
        l->last = rest;
        l->nalloc -= c->i + 1;
    }

    c->prev = part;
    c->part = rest;
    c->i = 0;

    return NGX_OK;
}


char *
ngx_http_ferrule_drop_lookalikes(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_ferrule_loc_conf_t *flcf = conf;

    u_char                        c;
    ngx_str_t                    *value;
    ngx_uint_t                    i, j;
    ngx_http_ferrule_lookalike_t *l;
    ngx_http_ferrule_main_conf_t *fmcf;

    if (flcf->lookalikes == NULL) {
        flcf->lookalikes = ngx_array_create(cf->pool, cf->args->nelts - 1,
                                            sizeof(ngx_http_ferrule_lookalike_t));
        if (flcf->lookalikes == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    value = cf->args->elts;

    for (i = 1; i < cf->args->nelts; i++) {
        if (value[i].len == 0) {
            return "needs header names";
        }

        l = ngx_array_push(flcf->lookalikes);
        if (l == NULL) {
            return NGX_CONF_ERROR;
        }

        l->lower.len = l->norm.len = value[i].len;
        l->lower.data = ngx_pnalloc(cf->pool, value[i].len);
        l->norm.data = ngx_pnalloc(cf->pool, value[i].len);
        if (l->lower.data == NULL || l->norm.data == NULL) {
            return NGX_CONF_ERROR;
        }

        for (j = 0; j < value[i].len; j++) {
            c = value[i].data[j];

            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
                  || (c >= '0' && c <= '9') || c == '-' || c == '_'))
            {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "\"%V\" is not a header name (letters, "
                                   "digits, \"-\" and \"_\")", &value[i]);
                return NGX_CONF_ERROR;
            }

            c = ngx_tolower(c);
            l->lower.data[j] = c;
            l->norm.data[j] = (c == '_') ? '-' : c;

            if (c == '_') {
                /* then a client's name with "-" alone may be its lookalike */
                flcf->lookalikes_dashes = 1;
            }
        }
    }

    fmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_ferrule_module);
    fmcf->lookalikes = 1;

    return NGX_CONF_OK;
}


/* a location's names: those of the levels above it, then its own */
char *
ngx_http_ferrule_merge_lookalikes(ngx_conf_t *cf,
    ngx_http_ferrule_loc_conf_t *prev, ngx_http_ferrule_loc_conf_t *conf)
{
    ngx_uint_t                     i;
    ngx_array_t                   *all;
    ngx_http_ferrule_lookalike_t  *l, *p;

    if (prev->lookalikes == NULL) {
        return NGX_CONF_OK;
    }

    conf->lookalikes_dashes |= prev->lookalikes_dashes;

    if (conf->lookalikes == NULL) {
        conf->lookalikes = prev->lookalikes;
        return NGX_CONF_OK;
    }

    all = ngx_array_create(cf->pool,
                           prev->lookalikes->nelts + conf->lookalikes->nelts,
                           sizeof(ngx_http_ferrule_lookalike_t));
    if (all == NULL) {
        return NGX_CONF_ERROR;
    }

    l = ngx_array_push_n(all, prev->lookalikes->nelts + conf->lookalikes->nelts);
    if (l == NULL) {
        return NGX_CONF_ERROR;
    }

    p = prev->lookalikes->elts;
    for (i = 0; i < prev->lookalikes->nelts; i++) {
        *l++ = p[i];
    }

    p = conf->lookalikes->elts;
    for (i = 0; i < conf->lookalikes->nelts; i++) {
        *l++ = p[i];
    }

    conf->lookalikes = all;

    return NGX_CONF_OK;
}


ngx_int_t
ngx_http_ferrule_lookalikes_init(ngx_conf_t *cf)
{
    ngx_http_handler_pt           *h;
    ngx_http_core_main_conf_t     *cmcf;
    ngx_http_ferrule_main_conf_t  *fmcf;

    fmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_ferrule_module);
    if (!fmcf->lookalikes) {
        return NGX_OK;
    }

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_REWRITE_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    *h = ngx_http_ferrule_lookalikes_handler;

    return NGX_OK;
}


/* whether the header `h` is a lookalike of one of `names` (not the name itself) */
static ngx_uint_t
ngx_http_ferrule_lookalike(ngx_array_t *names, ngx_table_elt_t *h)
{
    u_char                        c;
    ngx_uint_t                    i, j;
    ngx_http_ferrule_lookalike_t *l;

    l = names->elts;

    for (i = 0; i < names->nelts; i++) {
        if (l[i].norm.len != h->key.len) {
            continue;
        }

        for (j = 0; j < h->key.len; j++) {
            c = h->lowcase_key[j];
            if (c == '_') {
                c = '-';
            }
            if (c != l[i].norm.data[j]) {
                break;
            }
        }

        if (j == h->key.len
            && ngx_memcmp(h->lowcase_key, l[i].lower.data, h->key.len) != 0)
        {
            return 1;
        }
    }

    return 0;
}


static ngx_int_t
ngx_http_ferrule_lookalikes_handler(ngx_http_request_t *r)
{
    ngx_table_elt_t              *h;
    ngx_http_ferrule_cursor_t     c;
    ngx_http_ferrule_loc_conf_t  *flcf;

    /* a subrequest shares the main request's headers, dropped before it began */
    if (r != r->main) {
        return NGX_DECLINED;
    }

    flcf = ngx_http_get_module_loc_conf(r, ngx_http_ferrule_module);
    if (flcf->lookalikes == NULL) {
        return NGX_DECLINED;
    }

    ngx_memzero(&c, sizeof(ngx_http_ferrule_cursor_t));

    while ((h = ngx_http_ferrule_header_at(r, &c)) != NULL) {

        /* unless a name has "_", only a name with "_" can be a lookalike (the
         * quick look for most requests) */
        if (h->hash != 0
            && (flcf->lookalikes_dashes
                || ngx_strlchr(h->key.data, h->key.data + h->key.len, '_'))
            && ngx_http_ferrule_lookalike(flcf->lookalikes, h))
        {
            ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                           "ferrule: dropped the lookalike header \"%V\"",
                           &h->key);

            if (ngx_http_ferrule_remove_header(r, &c) != NGX_OK) {
                return NGX_HTTP_INTERNAL_SERVER_ERROR;
            }

            continue;
        }

        c.i++;
    }

    return NGX_DECLINED;
}
