/*
 * Removing a request header.
 *
 * Marking a header deleted (hash 0) hides it from NGINX's variables and from
 * realip, not from the proxy module, which sends every header of the list that
 * it does not set itself: a header the backend must not see is taken out of the
 * list, without moving any other, as NGINX keeps pointers to some of them
 * (r->headers_in.host, ...).
 */

#include "ngx_http_ferrule_module.h"


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
