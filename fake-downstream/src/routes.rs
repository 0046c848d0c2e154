//! The assembled routers: every dialect's business routes, the authorizer, and `/__admin`.

use axum::extract::Request;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;

use crate::http::{method_not_allowed, not_found, Ds};
use crate::service::Downstream;
use crate::{admin, github, native, slack, stripe};

impl Downstream {
    /// The service's whole HTTP router: the business API and `/__admin`, on one port, as a
    /// stand-alone fake service is used (like WireMock). Serve it with [`wire::serve`] so that
    /// the connection-level faults (`commit_then_drop`, `reset_before_commit`) can close
    /// connections.
    pub fn router(&self) -> Router {
        thread_local! {
            static ROUTES: Router<Downstream> = business_routes().merge(admin::admin_routes());
        }
        ROUTES.with(|routes| routes.clone().with_state(self.clone()))
    }

    /// The business API alone (`/v1/...`), for the port the executors under test reach: there
    /// `/__admin` answers 404, so an executor can neither read nor erase the evidence (the
    /// ledger, the journal) nor disarm the faults. Whoever judges uses the in-process API.
    pub fn business_router(&self) -> Router {
        // The routes are the same for every instance; a simulation builds one downstream per
        // run, so each thread builds the table once and clones it.
        thread_local! {
            static ROUTES: Router<Downstream> = business_routes();
        }
        ROUTES.with(|routes| routes.clone().with_state(self.clone()))
    }
}

/// Every dialect's business routes, the authorizer, and the fallbacks that journal a request
/// no route serves.
fn business_routes() -> Router<Downstream> {
    native::routes()
        .merge(stripe::routes())
        .merge(github::routes())
        .merge(slack::routes())
        .route("/v1/charges", post(create_charge))
        // The authorizer executors ask (not a business service: no faults, not journaled;
        // its decisions go to the observer).
        .route("/v1/authz", get(admin::authorize))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
}

/// `POST /v1/charges`, both dialects' route: a request with a Stripe secret key is Stripe's.
async fn create_charge(ds: Ds, request: Request) -> Response {
    let authorization = request.headers().get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    if stripe::speaks(authorization) {
        stripe::create_charge(ds, request).await
    } else {
        native::create_charge(ds, request).await
    }
}
