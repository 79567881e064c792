/*
 * ferrule_if_body { ... }: the block's directives apply to a request that may
 * carry a body (location).
 *
 * Where a proxying location has no Lua rewrite phase, a request with a body
 * still needs one, so that a 503 or an ssl-redirect comes before NGINX reads
 * the body (see lua/README.md). Without the module the template writes
 *
 *     if ($ferrule_request_body) { rewrite_by_lua_block { ... } }
 *
 * and every request pays the rewrite module's script engine for it (about 1 %
 * of a small proxied request). This block is the same nested configuration an
 * "if" builds, entered by a rewrite-phase handler of the module instead: a
 * configuration lookup and a look at the parsed headers.
 */

#include "ngx_http_ferrule_module.h"


static ngx_int_t ngx_http_ferrule_if_body_handler(ngx_http_request_t *r);


/* as the map it replaces: the methods that rarely carry a body, without one
 * (HTTP/2 has no Transfer-Encoding: a body of unknown length comes without
 * either header) */
static ngx_uint_t
ngx_http_ferrule_may_have_body(ngx_http_request_t *r)
{
    return r->headers_in.content_length != NULL
           || r->headers_in.transfer_encoding != NULL
           || !(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD|NGX_HTTP_OPTIONS
                             |NGX_HTTP_DELETE));
}


/* the block: a nested location configuration, built as the rewrite module
 * builds an "if" block's */
char *
ngx_http_ferrule_if_body(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_ferrule_loc_conf_t *flcf = conf;

    char                          *rv;
    void                          *mconf;
    ngx_uint_t                     i;
    ngx_conf_t                     save;
    ngx_http_module_t             *module;
    ngx_http_conf_ctx_t           *ctx, *pctx;
    ngx_http_core_loc_conf_t      *clcf, *pclcf;
    ngx_http_ferrule_main_conf_t  *fmcf;

    if (flcf->if_body) {
        return "is duplicate";
    }

    ctx = ngx_pcalloc(cf->pool, sizeof(ngx_http_conf_ctx_t));
    if (ctx == NULL) {
        return NGX_CONF_ERROR;
    }

    pctx = cf->ctx;
    ctx->main_conf = pctx->main_conf;
    ctx->srv_conf = pctx->srv_conf;

    ctx->loc_conf = ngx_pcalloc(cf->pool, sizeof(void *) * ngx_http_max_module);
    if (ctx->loc_conf == NULL) {
        return NGX_CONF_ERROR;
    }

    for (i = 0; cf->cycle->modules[i]; i++) {
        if (cf->cycle->modules[i]->type != NGX_HTTP_MODULE) {
            continue;
        }

        module = cf->cycle->modules[i]->ctx;

        if (module->create_loc_conf) {
            mconf = module->create_loc_conf(cf);
            if (mconf == NULL) {
                return NGX_CONF_ERROR;
            }

            ctx->loc_conf[cf->cycle->modules[i]->ctx_index] = mconf;
        }
    }

    pclcf = pctx->loc_conf[ngx_http_core_module.ctx_index];

    clcf = ctx->loc_conf[ngx_http_core_module.ctx_index];
    clcf->loc_conf = ctx->loc_conf;
    clcf->name = pclcf->name;
    clcf->noname = 1;

    /* merged with the location's configuration, as an "if" block is */
    if (ngx_http_add_location(cf, &pclcf->locations, clcf) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    flcf->if_body = ctx->loc_conf;

    save = *cf;
    cf->ctx = ctx;
    cf->cmd_type = NGX_HTTP_LIF_CONF;

    rv = ngx_conf_parse(cf, NULL);

    *cf = save;

    fmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_ferrule_module);
    fmcf->if_body = 1;

    return rv;
}


/* in postconfiguration: the handler, where some location has the block */
ngx_int_t
ngx_http_ferrule_if_body_init(ngx_conf_t *cf)
{
    ngx_uint_t                     n;
    ngx_http_handler_pt           *h;
    ngx_http_core_main_conf_t     *cmcf;
    ngx_http_ferrule_main_conf_t  *fmcf;

    fmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_ferrule_module);

    if (!fmcf->if_body) {
        return NGX_OK;
    }

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_REWRITE_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    /*
     * First in the list. NGINX runs a phase's handlers from the last one, so
     * this runs after the rewrite module's (the location's "if", "set" and
     * "return" come first, as with an "if" block written after them), and
     * lua-nginx-module moves its own handler to the end of the phase when it
     * first runs, so the block's rewrite_by_lua comes after this.
     */
    h = cmcf->phases[NGX_HTTP_REWRITE_PHASE].handlers.elts;
    n = cmcf->phases[NGX_HTTP_REWRITE_PHASE].handlers.nelts;
    ngx_memmove(&h[1], &h[0], (n - 1) * sizeof(ngx_http_handler_pt));
    h[0] = ngx_http_ferrule_if_body_handler;

    return NGX_OK;
}


static ngx_int_t
ngx_http_ferrule_if_body_handler(ngx_http_request_t *r)
{
    ngx_http_ferrule_loc_conf_t  *flcf;

    flcf = ngx_http_get_module_loc_conf(r, ngx_http_ferrule_module);

    if (flcf->if_body == NULL || !ngx_http_ferrule_may_have_body(r)) {
        return NGX_DECLINED;
    }

    r->loc_conf = flcf->if_body;
    ngx_http_update_location_config(r);

    return NGX_DECLINED;
}
