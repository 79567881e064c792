/*
 * Test-only module: prints the statements NGINX's configuration reader
 * (ngx_conf_read_token) makes of a text, so that a test can compare Ferrule's
 * snippet tokenizer (model/src/snippet/tokens.rs) with NGINX's own.
 *
 * The test prefixes every statement of the text, at the offset where Ferrule's
 * tokenizer says it starts, with `ferrule_token_echo` (or `_block` for one that
 * opens a block). NGINX then hands each statement's words to this module, which
 * prints them on stderr, hex-encoded, one line per statement:
 *   S <hex word> ...   a statement ending in ';'
 *   B <hex word> ...   a statement opening a block
 *   E                  the end of that block
 * If the two readers disagree on where a statement starts or what its words are,
 * the lines differ (or NGINX refuses the text).
 *
 * Never loaded by Ferrule and not installed in the image.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <stdio.h>


static char *ngx_ferrule_token_echo(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_ferrule_token_echo_block(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);


static ngx_command_t  ngx_ferrule_token_echo_commands[] = {

    { ngx_string("ferrule_token_echo"),
      NGX_MAIN_CONF|NGX_DIRECT_CONF|NGX_CONF_ANY,
      ngx_ferrule_token_echo,
      0,
      0,
      NULL },

    { ngx_string("ferrule_token_echo_block"),
      NGX_MAIN_CONF|NGX_DIRECT_CONF|NGX_CONF_BLOCK|NGX_CONF_ANY,
      ngx_ferrule_token_echo_block,
      0,
      0,
      NULL },

      ngx_null_command
};


static ngx_core_module_t  ngx_ferrule_token_echo_module_ctx = {
    ngx_string("ferrule_token_echo"),
    NULL,
    NULL
};


ngx_module_t  ngx_ferrule_token_echo_module = {
    NGX_MODULE_V1,
    &ngx_ferrule_token_echo_module_ctx,    /* module context */
    ngx_ferrule_token_echo_commands,       /* module directives */
    NGX_CORE_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    NULL,                                  /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    NULL,                                  /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


/* One line: the kind, then the words after the echo directive's own name. */
static void
ngx_ferrule_token_echo_print(ngx_conf_t *cf, char kind)
{
    ngx_str_t   *words;
    ngx_uint_t   i, j;

    words = cf->args->elts;
    fputc(kind, stderr);

    for (i = 1; i < cf->args->nelts; i++) {
        fputc(' ', stderr);

        for (j = 0; j < words[i].len; j++) {
            fprintf(stderr, "%02x", words[i].data[j]);
        }

        if (words[i].len == 0) {
            fputc('-', stderr);
        }
    }

    fputc('\n', stderr);
}


static char *
ngx_ferrule_token_echo(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_ferrule_token_echo_print(cf, 'S');
    return NGX_CONF_OK;
}


static char *
ngx_ferrule_token_echo_block(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char  *rv;

    ngx_ferrule_token_echo_print(cf, 'B');

    /* The block's statements are read in the same (main) context, so that
     * their echo directives resolve to this module too. */
    rv = ngx_conf_parse(cf, NULL);

    fputs("E\n", stderr);
    fflush(stderr);

    return rv;
}
