/*
 * $request_id from the kernel's CSPRNG, a page at a time.
 *
 * NGINX draws each $request_id from OpenSSL's RAND_bytes(): with OpenSSL 3 every
 * call looks up the provider, parses its parameters, runs a DRBG and checks for
 * a fork, about 3 % of a small proxied request. ingress-nginx's defaults use the
 * id on every request (X-Request-ID to the backend, the access log), so the
 * module replaces the variable's handler: each worker fills a 4 KiB page with
 * getrandom(2) and hands out 16 bytes of it per request, in NGINX's form (32
 * lowercase hex digits). Replacing the handler rather than adding a variable
 * keeps one value per request wherever a configuration names $request_id. If
 * the kernel refuses, NGINX's own handler answers.
 */

#include "ngx_http_ferrule_module.h"

#include <sys/random.h>


#define NGX_HTTP_FERRULE_ID_BYTES  16
#define NGX_HTTP_FERRULE_ID_PAGE   4096


static ngx_int_t ngx_http_ferrule_request_id(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);


static ngx_http_get_variable_pt  ngx_http_ferrule_request_id_nginx;

/* the worker's page of random bytes and how much of it is left */
static u_char      ngx_http_ferrule_id_page[NGX_HTTP_FERRULE_ID_PAGE];
static size_t      ngx_http_ferrule_id_left;
/* the process that filled it: a forked process never reuses its parent's */
static ngx_pid_t   ngx_http_ferrule_id_pid;


/* in postconfiguration, before NGINX indexes its variables */
ngx_int_t
ngx_http_ferrule_request_id_init(ngx_conf_t *cf)
{
    ngx_uint_t                  i;
    ngx_hash_key_t             *key;
    ngx_http_variable_t        *v;
    ngx_http_core_main_conf_t  *cmcf;

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    key = cmcf->variables_keys->keys.elts;

    for (i = 0; i < cmcf->variables_keys->keys.nelts; i++) {
        if (key[i].key.len != sizeof("request_id") - 1
            || ngx_strncmp(key[i].key.data, "request_id", key[i].key.len) != 0)
        {
            continue;
        }

        v = key[i].value;
        ngx_http_ferrule_request_id_nginx = v->get_handler;
        v->get_handler = ngx_http_ferrule_request_id;

        break;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_ferrule_request_id(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char   *id, *random;
    ssize_t   n;

    if (ngx_http_ferrule_id_left < NGX_HTTP_FERRULE_ID_BYTES
        || ngx_http_ferrule_id_pid != ngx_pid)
    {
        n = getrandom(ngx_http_ferrule_id_page, NGX_HTTP_FERRULE_ID_PAGE,
                      GRND_NONBLOCK);

        if (n != NGX_HTTP_FERRULE_ID_PAGE) {
            ngx_http_ferrule_id_left = 0;
            return ngx_http_ferrule_request_id_nginx(r, v, data);
        }

        ngx_http_ferrule_id_left = NGX_HTTP_FERRULE_ID_PAGE;
        ngx_http_ferrule_id_pid = ngx_pid;
    }

    id = ngx_pnalloc(r->pool, NGX_HTTP_FERRULE_ID_BYTES * 2);
    if (id == NULL) {
        return NGX_ERROR;
    }

    random = ngx_http_ferrule_id_page + NGX_HTTP_FERRULE_ID_PAGE
             - ngx_http_ferrule_id_left;
    ngx_hex_dump(id, random, NGX_HTTP_FERRULE_ID_BYTES);

    /* what was handed out is not kept */
    ngx_memzero(random, NGX_HTTP_FERRULE_ID_BYTES);
    ngx_http_ferrule_id_left -= NGX_HTTP_FERRULE_ID_BYTES;

    v->len = NGX_HTTP_FERRULE_ID_BYTES * 2;
    v->data = id;
    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;

    return NGX_OK;
}
