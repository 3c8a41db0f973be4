/* cpu_destroy.c - the CPU backend's destruction (cpu_backend.h): frees
 * every buffer be_cpu_new (cpu_build.c) allocated; a field it did not
 * allocate is NULL. A buffer added there is freed here. */
#include <stdlib.h>

#include "cpu_backend.h"
#include "cpu_team.h"

void cpu_destroy(backend *b) {
    cpu_backend *cb = (cpu_backend *)b;
    if (!cb) return;
    free(cb->wcls.f.p);
    free(cb->wcls.qown);
    free(cb->x8_arena);
    free(cb->emb);
    free(cb->out_norm);
    if (cb->layers) {
        for (int l = 0; l < b->m->cfg.n_layers; l++) {
            cpu_layer *w = &cb->layers[l];
            free(w->conv.norm);
            free(w->conv.kern);
            free(w->conv.in.f.p), free(w->conv.in.qown);
            free(w->conv.out.f.p), free(w->conv.out.qown);
            free(w->ssm.norm);
            free(w->ssm.kern);
            free(w->ssm.kern_b);
            free(w->ssm.head);
            free(w->ssm.gnorm);
            free(w->ssm.in.f.p), free(w->ssm.in.qown);
            free(w->ssm.out.f.p), free(w->ssm.out.qown);
            free(w->attn.norm);
            free(w->attn.bqkv);
            free(w->attn.q_norm);
            free(w->attn.k_norm);
            for (int i = 0; i < 3; i++) free(w->attn.qkv[i].f.p), free(w->attn.qkv[i].qown);
            free(w->attn.wo.f.p);
            free(w->attn.wo.qown);
            free(w->attn.bo);
            free(w->attn.sinks);
            free(w->moe.router_b);
            free(w->moe.gate_b);
            free(w->moe.up_b);
            free(w->moe.down_b);
            free(w->moe.probs_b);
            free(w->moe.router_scale);
            free(w->moe.post_norm_1);
            free(w->moe.post_norm_2);
            free(w->moe.down_scale);
            free(w->attn.post_norm);
            free(w->ffn.post_norm);
            free(w->ffn.out_scale);
            free(w->ple.post_norm);
            free(w->ple.gate.f.p), free(w->ple.gate.qown);
            free(w->ple.proj.f.p), free(w->ple.proj.qown);
            free(w->ffn.norm);
            free(w->ffn.w1.f.p);
            free(w->ffn.w1.qown);
            free(w->ffn.w3.f.p);
            free(w->ffn.w3.qown);
            free(w->ffn.w2.f.p);
            free(w->ffn.w2.qown);
            free(w->moe.norm);
            free(w->moe.router.f.p);
            free(w->moe.router.qown);
            if (w->moe.exps)
                for (int i = 0; i < 3 * b->m->cfg.n_expert; i++)
                    free(w->moe.exps[i].f.p), free(w->moe.exps[i].qown);
            free(w->moe.exps);
        }
    }
    free(cb->layers);
    free(cb->inv_freq);
    free(cb->inv_freq_swa);
    free(cb->rope_swa);
    free(cb->ple_model.f.p), free(cb->ple_model.qown);
    free(cb->ple_norm);
    free(cb->ple);
    free(cb->ple_h);
    free(cb->moe_acc);
    free(cb->kv);
    free(cb->kv8);
    free(cb->x);
    free(cb->xb);
    free(cb->xo);
    free(cb->qkv);
    free(cb->att_out);
    free(cb->h13);
    free(cb->h);
    free(cb->moe_p);
    free(cb->moe_sel);
    free(cb->moe_wt);
    free(cb->moe_tok);
    free(cb->moe_off);
    free(cb->moe_hq);
    free(cb->moe_gw);
    free(cb->moe_xg);
    free(cb->moe_y);
    free(cb->rope);
    free(cb->q_scale);
    free(cb->scores);
    free(cb->hot_list);
    free(cb->n_list);
    free(cb->seq_last);
    free(cb->cut);
    free(cb->share);
    free(cb->done_s);
    free(cb->cls_s);
    free(cb->pcut);
    free(cb->steal);
    cpu_team_free(cb->team);
    free(cb->att_blk);
    free(cb->att_rows);
    free(cb->att_mass);
    for (int a = 0; a < ACT_N; a++) free(cb->xq[a]);
    free(cb->xoq);
    free(cb->state);
    free(cb->state_pos);
    free(cb->conv_bcx);
    free(cb->conv_y);
    free(cb->ssm_zx);
    free(cb->ssm_y);
    free(cb);
}
